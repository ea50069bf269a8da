/*
 * The udp transport's sockets: the interface's, which every peer's
 * datagrams arrive on, the sockets an endpoint sends from, GRO and GSO,
 * and reading datagrams in batches.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/udp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tl/udp/udp.h"
#include "util/log.h"

/* The address peers reach us at: TMX_UDP_ADDR, else the first IPv4
 * interface that is up and not loopback, else loopback. Also its MTU. */
static tmx_status_t pick_local(const char *want, struct in_addr *ip, uint32_t *ifmtu)
{
    int found = strcmp(want, "auto") == 0;
    struct ifaddrs *ifs, *i;
    struct ifreq ifr;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    const char *name = "lo";

    ip->s_addr = htonl(INADDR_LOOPBACK);
    *ifmtu = 65536;
    if (getifaddrs(&ifs) == 0) {
        for (i = ifs; i != NULL; i = i->ifa_next) {
            struct sockaddr_in *sa = (struct sockaddr_in *)i->ifa_addr;
            char buf[INET_ADDRSTRLEN];
            int lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
            if (sa == NULL || sa->sin_family != AF_INET || !(i->ifa_flags & IFF_UP))
                continue;
            inet_ntop(AF_INET, &sa->sin_addr, buf, sizeof(buf));
            if ((strcmp(want, "auto") == 0 && !lo) || strcmp(want, buf) == 0) {
                *ip = sa->sin_addr;
                name = i->ifa_name;
                found = 1;
                break;
            }
        }
        memset(&ifr, 0, sizeof(ifr));
        snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
        if (fd >= 0 && ioctl(fd, SIOCGIFMTU, &ifr) == 0)
            *ifmtu = (uint32_t)ifr.ifr_mtu;
        freeifaddrs(ifs);
    }
    if (fd >= 0)
        close(fd);
    if (!found) {
        util_error("udp: TMX_UDP_ADDR=%s is the address of no interface that is up", want);
        return TMX_ERR_INVALID;
    }
    return TMX_OK;
}

/* A socket with our buffer sizes, not yet bound. */
static int sock_new(void)
{
    int sz = UDP_SOCKBUF, fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    return fd;
}

/* The node's shared port (udp_node.c) if it can be had, else a port of
 * our own. */
static tmx_status_t sock_bind(udp_iface_t *ui, uint32_t *ifmtu)
{
    socklen_t slen = sizeof(ui->sock.self_sa);
    tmx_status_t st;
    int fd;

    memset(&ui->sock.self_sa, 0, sizeof(ui->sock.self_sa));
    ui->sock.self_sa.sin_family = AF_INET;
    if ((st = pick_local(ui->cfg.set.addr, &ui->sock.self_sa.sin_addr, ifmtu)) != TMX_OK)
        return st;
    if ((fd = sock_new()) < 0)
        goto err_log;
    if (udp_node_open(ui, fd) == TMX_OK)
        goto bound;
    close(fd); /* for a fresh one, without SO_REUSEPORT, on a port of its own
                  (a join that failed late has set the node's) */
    ui->sock.self_sa.sin_port = 0;
    if ((ui->sock.fd = sock_new()) < 0)
        goto err_log;
    if (bind(ui->sock.fd, (struct sockaddr *)&ui->sock.self_sa, sizeof(ui->sock.self_sa)) != 0 ||
        getsockname(ui->sock.fd, (struct sockaddr *)&ui->sock.self_sa, &slen) != 0)
        goto err_close;
bound:
    /* GSO is tried on first use, GRO when a read starts (udp_gro_set);
     * refused once, never again */
    ui->sock.gso = ui->sock.gro_ok = ui->cfg.set.offload;
    udp_live_socket(ui);
    return TMX_OK;

err_close:
    close(ui->sock.fd);
    ui->sock.fd = -1;
err_log:
    util_error("udp: cannot open a socket on %s: %s", inet_ntoa(ui->sock.self_sa.sin_addr), strerror(errno));
    return TMX_ERR_IO;
}

/* UDP GRO lets one read take a whole burst the peer sent with GSO, but
 * it costs every datagram received some of the kernel's time (about 65 ns
 * of a one-way latency on a veth pair), so it is on only while data comes
 * in bulk: reads we issued, reads that find several datagrams or a burst
 * GRO joined. It goes off UDP_GRO_IDLE_US after the last of those. */
void udp_gro_set(udp_iface_t *ui, int on)
{
    int v = on;

    if (!ui->sock.gro_ok || ui->sock.gro_on == on)
        return;
    if (setsockopt(ui->sock.fd, SOL_UDP, UDP_GRO, &v, sizeof(v)) != 0) {
        util_info("udp: no UDP GRO here (%s)", strerror(errno));
        ui->sock.gro_ok = 0;
        return;
    }
    ui->sock.gro_on = on;
    ui->sock.gro_used_us = udp_now_us();
}

static uint64_t conn_key(const struct sockaddr_in *sa)
{
    return (uint64_t)ntohl(sa->sin_addr.s_addr) << 16 | ntohs(sa->sin_port);
}

/* ep sends through the interface's socket again; the connected socket
 * closes with its last user (the address's state stays while endpoints
 * are at it). */
void udp_sock_ep_disconnect(udp_iface_t *ui, udp_ep_t *ep)
{
    udp_conn_t *c = udp_ep_conn(ui, ep);

    if (!ep->sock)
        return;
    ep->sock = 0;
    if (--c->users > 0)
        return;
    close(c->fd);
    c->fd = -1;
    ui->sock.n_conn--;
}

/* The table of addresses by id: a free slot holds the next free one's
 * id, shifted left, with the low bit set (a pointer's low bit is clear). */
#define CONN_FREE_BIT ((uintptr_t)1)
#define CONN_NONE (UINT32_MAX >> 1)

static int conn_tab_grow(udp_sock_t *s)
{
    uint32_t n = s->conn_slots ? s->conn_slots + s->conn_slots / 2 : 16;
    udp_conn_t **tab;

    if (n <= s->conn_slots || n >= CONN_NONE)
        return -1;
    if ((tab = realloc(s->conn_tab, n * sizeof(*tab))) == NULL)
        return -1;
    for (uint32_t i = s->conn_slots; i < n; i++) {
        uint32_t next = i + 1 < n ? i + 1 : CONN_NONE;
        tab[i] = (udp_conn_t *)(((uintptr_t)next << 1) | CONN_FREE_BIT);
    }
    s->conn_free = s->conn_slots;
    s->conn_tab = tab;
    s->conn_slots = n;
    return 0;
}

/* A slot for c, c->id; -1 when out of memory. */
static int conn_tab_add(udp_sock_t *s, udp_conn_t *c)
{
    if (s->conn_free == CONN_NONE && conn_tab_grow(s) != 0)
        return -1;
    c->id = s->conn_free;
    s->conn_free = (uint32_t)((uintptr_t)s->conn_tab[c->id] >> 1);
    s->conn_tab[c->id] = c;
    return 0;
}

static void conn_tab_del(udp_sock_t *s, const udp_conn_t *c)
{
    s->conn_tab[c->id] = (udp_conn_t *)(((uintptr_t)s->conn_free << 1) | CONN_FREE_BIT);
    s->conn_free = c->id;
}

udp_conn_t *udp_conn_get(udp_iface_t *ui, const struct sockaddr_in *sa)
{
    udp_conn_t *c = util_idmap_get(&ui->sock.conns, conn_key(sa));

    if (c == NULL) {
        if ((c = calloc(1, sizeof(*c))) == NULL)
            return NULL;
        c->sa = *sa;
        c->key = conn_key(sa);
        c->fd = -1;
        if (conn_tab_add(&ui->sock, c) != 0)
            goto err_free;
        if (util_idmap_put(&ui->sock.conns, c) != 0)
            goto err_tab_del;
    }
    c->refs++;
    return c;

err_tab_del:
    conn_tab_del(&ui->sock, c);
err_free:
    free(c);
    return NULL;
}

void udp_conn_put(udp_iface_t *ui, udp_conn_t *c)
{
    if (--c->refs > 0)
        return;
    util_idmap_del(&ui->sock.conns, c->key);
    conn_tab_del(&ui->sock, c);
    free(c);
}

int udp_ep_move(udp_iface_t *ui, udp_ep_t *ep, const struct sockaddr_in *sa)
{
    udp_conn_t *c;

    if (conn_key(sa) == udp_ep_conn(ui, ep)->key)
        return 0;
    if ((c = udp_conn_get(ui, sa)) == NULL)
        return -1;
    udp_sock_ep_disconnect(ui, ep);
    udp_conn_put(ui, udp_ep_conn(ui, ep));
    ep->conn = c->id;
    return 0;
}

/* A socket bound to our address and connected to c's; -1 when none. */
static int conn_sock_open(udp_iface_t *ui, const udp_conn_t *c, uint64_t uuid)
{
    struct sockaddr_in me = ui->sock.self_sa;
    int sz = UDP_SOCKBUF, fd;

    me.sin_port = 0;
    if ((fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
        util_info("udp: no socket of its own for peer %016llx (%s): the shared one sends", (unsigned long long)uuid,
                  strerror(errno));
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    if (bind(fd, (struct sockaddr *)&me, sizeof(me)) != 0 ||
        connect(fd, (struct sockaddr *)&c->sa, sizeof(c->sa)) != 0) {
        util_info("udp: cannot connect a socket to peer %016llx at %s:%u (%s): the shared one sends",
                  (unsigned long long)uuid, inet_ntoa(c->sa.sin_addr), ntohs(c->sa.sin_port), strerror(errno));
        close(fd);
        return -1;
    }
    udp_live_ep_socket(fd);
    return fd;
}

/* A socket for sending to a peer, bound to our address and connected to
 * the peer's: the kernel then keeps the route instead of looking it up
 * for every datagram, about 0.1 us of each one-way latency between two
 * namespaces. Its datagrams leave from another port than the
 * interface's, so every header names the port that replies go to. The
 * endpoints at one address share it: with a port per node, that is every
 * process of the remote node. At most conn_max of them (a descriptor
 * each); beyond that, or when the kernel refuses, the interface's socket
 * sends. */
void udp_sock_ep_connect(udp_iface_t *ui, udp_ep_t *ep)
{
    udp_conn_t *c = udp_ep_conn(ui, ep);

    if (ep->sock)
        return;
    if (c->fd < 0) {
        if (ui->sock.n_conn >= ui->cfg.conn_max || (c->fd = conn_sock_open(ui, c, ep->super.uuid)) < 0)
            return;
        ui->sock.n_conn++;
    }
    c->users++;
    ep->sock = 1;
}

/* The size of the datagrams the kernel coalesced into this buffer (UDP
 * GRO), or 0 for a single datagram. */
static size_t gro_size(struct msghdr *mh)
{
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm != NULL; cm = CMSG_NXTHDR(mh, cm)) {
        int v;
        if (cm->cmsg_level != SOL_UDP || cm->cmsg_type != UDP_GRO)
            continue;
        memcpy(&v, CMSG_DATA(cm), sizeof(v));
        return v > 0 ? (size_t)v : 0;
    }
    return 0;
}

static void rmsg_reset(udp_iface_t *ui, int i)
{
    ui->sock.rmsgs[i].msg_hdr = (struct msghdr){&ui->sock.rfrom[i], sizeof(ui->sock.rfrom[i]), &ui->sock.riov[i], 1,
                                           ui->sock.rctl[i], sizeof(ui->sock.rctl[i]), 0};
}

static void rmsgs_init(udp_iface_t *ui)
{
    for (int i = 0; i < UDP_RECV_BATCH; i++) {
        ui->sock.riov[i] = (struct iovec){ui->sock.rbufs + (size_t)i * 65536, 65536};
        rmsg_reset(ui, i);
    }
}


/* With IP_RECVERR, an ICMP error (a refusal, an unreachable host) is
 * reported by the next read, its details waiting in the error queue
 * (udp_live.c, which acts on refusals only). */
static void recv_error(udp_iface_t *ui, const char *call)
{
    if (errno == EAGAIN || errno == EINTR)
        return;
    util_debug("udp: %s: %s", call, strerror(errno));
    udp_live_send_error(ui, NULL, ui->sock.fd, errno);
}

/* One datagram by recvfrom, the cheapest read there is (no message
 * header or control data to copy in and out). */
static int recv_one(udp_iface_t *ui)
{
    socklen_t fl = sizeof(ui->sock.rfrom[0]);
    ssize_t n = recvfrom(ui->sock.fd, ui->sock.rbufs, 65536, MSG_DONTWAIT, (struct sockaddr *)&ui->sock.rfrom[0], &fl);

    if (n < 0) {
        recv_error(ui, "recvfrom");
        ui->sock.recv_streak = 0;
        return 0;
    }
    if (++ui->sock.recv_streak >= 2) /* a stream, not a ping-pong: batch */
        ui->sock.recv_vlen = UDP_RECV_BATCH;
    ui->rx_now_us = udp_now_us();
    ui->stats.dgrams_in++;
    udp_buf_input(ui, ui->sock.rbufs, (size_t)n, udp_gro_guess(ui->sock.rbufs, (size_t)n), &ui->sock.rfrom[0]);
    return 1;
}

/* Reads one datagram while they come one at a time (a ping-pong), since
 * recvmmsg looks for a second before it returns, which delays the answer.
 * Two polls in a row that each found one switch to batches, and a batch
 * that brings two or more keeps the batches. */
int udp_sock_recv(udp_iface_t *ui)
{
    unsigned vlen = ui->sock.recv_vlen;
    int n, bulk;

    if (vlen == 1)
        return recv_one(ui);
    n = recvmmsg(ui->sock.fd, ui->sock.rmsgs, vlen, MSG_DONTWAIT, NULL);
    if (n < 0) {
        recv_error(ui, "recvmmsg");
        ui->sock.recv_vlen = 1;
        ui->sock.recv_streak = 0;
        return 0;
    }
    if (n == 1) {
        ui->sock.recv_vlen = 1;
        ui->sock.recv_streak = 0;
    }
    bulk = n >= 2;
    ui->rx_now_us = udp_now_us();
    ui->stats.dgrams_in += (uint64_t)n;
    for (int i = 0; i < n; i++) {
        unsigned char *buf = ui->sock.riov[i].iov_base;
        size_t len = ui->sock.rmsgs[i].msg_len, gro = gro_size(&ui->sock.rmsgs[i].msg_hdr);
        bulk |= gro != 0;
        /* a burst joined while GRO was on comes without the note once it is off */
        if (gro == 0)
            gro = udp_gro_guess(buf, len);
        udp_buf_input(ui, buf, len, gro, &ui->sock.rfrom[i]);
        rmsg_reset(ui, i);
    }
    if (bulk) { /* a stream, or a burst GRO joined */
        ui->sock.gro_used_us = ui->rx_now_us;
        udp_gro_set(ui, 1);
    }
    return n;
}

tmx_status_t udp_sock_open(udp_iface_t *ui, uint32_t *ifmtu)
{
    tmx_status_t st;

    ui->sock.fd = -1;
    ui->sock.tx_lane = -1;
    for (int i = 0; i < UDP_LANES_MAX; i++)
        ui->sock.lane_fd[i] = -1;
    util_idmap_init(&ui->sock.conns, offsetof(udp_conn_t, key));
    ui->sock.conn_tab = NULL;
    ui->sock.conn_slots = 0;
    ui->sock.conn_free = CONN_NONE;
    if ((ui->sock.rbufs = malloc((size_t)UDP_RECV_BATCH * 65536)) == NULL)
        return TMX_ERR_NOMEM;
    if ((st = sock_bind(ui, ifmtu)) != TMX_OK) {
        free(ui->sock.rbufs);
        ui->sock.rbufs = NULL;
        return st;
    }
    rmsgs_init(ui);
    ui->sock.recv_vlen = UDP_RECV_BATCH;
    return TMX_OK;
}

void udp_sock_close(udp_iface_t *ui)
{
    udp_node_lanes_close(ui);
    udp_node_close(ui); /* a shared port's socket closes under the node's lock */
    if (ui->sock.fd >= 0)
        close(ui->sock.fd);
    ui->sock.fd = -1;
    free(ui->sock.rbufs);
    ui->sock.rbufs = NULL;
    util_idmap_fini(&ui->sock.conns); /* empty: every endpoint let go of its socket */
    free(ui->sock.conn_tab);
    ui->sock.conn_tab = NULL;
    ui->sock.conn_slots = 0;
}
