/*
 * The udp transport: reliable, ordered delivery per peer over unreliable
 * datagrams, after seed 001 (Open MPI's usNIC BTL). This file holds the
 * socket, the endpoints, segmentation and the receive path; udp_rel.c the
 * sequence numbers, ACKs and retransmission; udp_get.c the emulated
 * remote read; udp_fault.c fault injection.
 */
#include <assert.h>
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tl/udp/udp.h"
#include "util/crc32c.h"
#include "util/log.h"

#define UDP_SOCKBUF (8 << 20)
#define UDP_EAGER_LIMIT (32 * 1024)
static_assert(UDP_EAGER_LIMIT >= TMX_INJECT_MAX, "injected sends go eagerly");
#define UDP_LINGER_US 1000000
#define UDP_HOT_POLLS 100000    /* after a datagram, poll the socket every time */
#define UDP_MAX_EPS 65536       /* peers, a bound on state made by strangers */
#define UDP_GRO_IDLE_US 100000  /* GRO goes off this long after the last read */

uint64_t udp_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* --------------------------------------------------------------- socket */

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

static tmx_status_t sock_open(udp_iface_t *ui, uint32_t *ifmtu)
{
    socklen_t slen = sizeof(ui->self_sa);
    int sz = UDP_SOCKBUF;
    tmx_status_t st;

    memset(&ui->self_sa, 0, sizeof(ui->self_sa));
    ui->self_sa.sin_family = AF_INET;
    if ((st = pick_local(ui->set.addr, &ui->self_sa.sin_addr, ifmtu)) != TMX_OK)
        return st;
    ui->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ui->fd < 0)
        goto err_log;
    if (setsockopt(ui->fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) != 0)
        setsockopt(ui->fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    if (setsockopt(ui->fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) != 0)
        setsockopt(ui->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    /* GSO is tried on first use, GRO when a read starts (udp_gro_set);
     * refused once, never again */
    ui->gso = ui->gro_ok = ui->set.offload;
    if (bind(ui->fd, (struct sockaddr *)&ui->self_sa, sizeof(ui->self_sa)) != 0 ||
        getsockname(ui->fd, (struct sockaddr *)&ui->self_sa, &slen) != 0)
        goto err_close;
    udp_live_socket(ui);
    return TMX_OK;

err_close:
    close(ui->fd);
err_log:
    util_error("udp: cannot open a socket on %s: %s", inet_ntoa(ui->self_sa.sin_addr), strerror(errno));
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

    if (!ui->gro_ok || ui->gro_on == on)
        return;
    if (setsockopt(ui->fd, SOL_UDP, UDP_GRO, &v, sizeof(v)) != 0) {
        util_info("udp: no UDP GRO here (%s)", strerror(errno));
        ui->gro_ok = 0;
        return;
    }
    ui->gro_on = on;
    ui->gro_used_us = udp_now_us();
}

static void settings_apply(udp_iface_t *ui, uint32_t ifmtu)
{
    uint64_t mtu = ui->set.mtu;

    ui->window = ui->set.window;
    if (ui->window & (ui->window - 1)) { /* slots are seq & (window - 1) */
        uint32_t w = 1u << (31 - __builtin_clz(ui->window));
        util_info("udp: TMX_UDP_WINDOW %u is not a power of two: using %u", ui->window, w);
        ui->window = w;
    }
    ui->ack_delay_us = ui->set.ack_delay_us;
    ui->rto_us = ui->set.rto_ms * 1000;
    ui->peer_timeout_us = ui->set.peer_timeout_ms * 1000;
    ui->conn_max = ui->set.connect_max;
    if (mtu == 0)
        mtu = ifmtu;
    mtu = mtu > 28 ? mtu - 28 : 576; /* IPv4 and UDP headers */
    if (mtu > UDP_MAX_DGRAM)
        mtu = UDP_MAX_DGRAM;
    if (mtu < UDP_PRIO_MTU)
        mtu = UDP_PRIO_MTU;
    ui->mtu = (uint32_t)mtu;
}

static void rmsgs_init(udp_iface_t *ui);

static tmx_status_t udp_iface_open(const tl_iface_params_t *params, tl_iface_t **out)
{
    udp_iface_t *ui = calloc(1, sizeof(*ui));
    uint32_t ifmtu;
    tmx_status_t st = TMX_ERR_NOMEM;

    if (ui == NULL)
        return TMX_ERR_NOMEM;
    ui->super.ops = &tl_udp_ops;
    ui->super.recv_cb = params->recv_cb;
    ui->super.fail_cb = params->fail_cb;
    ui->super.fail_arg = params->fail_arg;
    ui->super.get_kinds = TL_GET_COPY;
    ui->super.mem_check = params->mem_check;
    ui->super.admit_cb = params->admit_cb;
    ui->super.recv_arg = params->recv_arg;
    ui->super.eager_limit = UDP_EAGER_LIMIT;
    ui->super.max_packet = UDP_MAX_PACKET;
    ui->super.get_checked = 1;
    ui->uuid = params->uuid;
    ui->job_key = params->job_key;
    ui->set = params->settings->udp;
    util_dlist_init(&ui->eps);
    util_idmap_init(&ui->ep_map);
    util_dlist_init(&ui->acks);
    util_dlist_init(&ui->gets);
    util_dlist_init(&ui->serves);
    util_wheel_init(&ui->wheel, UDP_TICK_US, udp_now_us());
    udp_faults_init(&ui->faults, &ui->set.faults, params->uuid);
    ui->rbufs = malloc((size_t)UDP_RECV_BATCH * 65536);
    if (ui->rbufs == NULL || (st = sock_open(ui, &ifmtu)) != TMX_OK) {
        free(ui->rbufs);
        udp_faults_fini(&ui->faults);
        free(ui);
        return st;
    }
    settings_apply(ui, ifmtu);
    rmsgs_init(ui);
    ui->recv_vlen = UDP_RECV_BATCH;
    ui->poll_now_us = udp_now_us();
    ui->wait_cap_us = 1000;
    ui->seg_cap = ui->mtu;
    util_pool_init(&ui->segs, sizeof(udp_seg_t) + ui->seg_cap, 64);
    util_pool_init(&ui->hsegs, sizeof(udp_seg_t) + sizeof(udp_hdr_t), 256);
    util_info("udp: %s:%u, datagrams of %u bytes, window %u", inet_ntoa(ui->self_sa.sin_addr),
              ntohs(ui->self_sa.sin_port), ui->mtu, ui->window);
    *out = &ui->super;
    return TMX_OK;
}

/* The endpoint's own socket goes (see ep_connect); the shared one sends. */
static void ep_disconnect(udp_iface_t *ui, udp_ep_t *ep)
{
    if (ep->fd < 0)
        return;
    close(ep->fd);
    ep->fd = -1;
    ui->n_conn--;
}

static void ep_free(udp_iface_t *ui, udp_ep_t *ep)
{
    util_debug("udp: peer %u: round trip %llu us (deviation %llu us), timeout %llu us",
               ep->super.peer, (unsigned long long)ep->srtt_us,
               (unsigned long long)ep->rttvar_us,
               (unsigned long long)ep->tx[UDP_CH_DATA].rto_us);
    for (int ch = 0; ch < UDP_N_CH; ch++) {
        util_timer_cancel(&ep->tx[ch].timer);
        udp_tx_fini(&ep->tx[ch]);
        udp_rx_fini(ui, &ep->rx[ch]);
    }
    if (ep->ack_queued)
        util_dlist_unlink(&ep->ack_link);
    util_dlist_unlink(&ep->link);
    if (util_idmap_get(&ui->ep_map, ep->uuid) == ep)
        util_idmap_del(&ui->ep_map, ep->uuid);
    ui->n_eps--;
    ep_disconnect(ui, ep);
    free(ep);
}

static int tx_idle(udp_iface_t *ui)
{
    util_dlist_t *pos;

    util_dlist_foreach(pos, &ui->eps) {
        udp_ep_t *ep = util_container_of(pos, udp_ep_t, link);
        for (int ch = 0; ch < UDP_N_CH && !ep->failed; ch++) {
            if (ep->tx[ch].una != ep->tx[ch].next_seq)
                return 0;
        }
    }
    return 1;
}

static int udp_progress(tl_iface_t *iface);

/* Our last segments (a FIN, say) may still need retransmitting for a peer
 * to finish: keep the transport going a little while they are unacked. */
static void linger(udp_iface_t *ui)
{
    uint64_t end = udp_now_us() + UDP_LINGER_US;

    while (!tx_idle(ui) && udp_now_us() < end) {
        struct pollfd pfd = {ui->fd, POLLIN, 0};
        udp_progress(&ui->super);
        poll(&pfd, 1, 1);
    }
}

static void bye_all(udp_iface_t *ui);

static void udp_iface_close(tl_iface_t *iface)
{
    udp_iface_t *ui = (udp_iface_t *)iface;

    /* reads are abandoned before lingering: their data, arriving now,
     * finds no read and is dropped, and no callback runs */
    udp_get_fini(ui);
    ui->closing = 1;
    linger(ui);
    udp_ack_flush(ui, UINT64_MAX);
    bye_all(ui);
    util_info("udp: %llu segments sent, %llu resent, %llu probes, %llu timeouts, %llu stalls reported; "
              "%llu datagrams received, %llu dropped", (unsigned long long)ui->segs_sent,
              (unsigned long long)ui->retransmits, (unsigned long long)ui->probes,
              (unsigned long long)ui->timeouts,
              (unsigned long long)ui->stalls_sent, (unsigned long long)ui->dgrams_in,
              (unsigned long long)ui->dropped);
    udp_get_fini(ui); /* refusals of reads asked meanwhile */
    while (!util_dlist_empty(&ui->eps))
        ep_free(ui, util_container_of(ui->eps.next, udp_ep_t, link));
    util_idmap_fini(&ui->ep_map);
    udp_faults_fini(&ui->faults);
    util_pool_fini(&ui->segs);
    util_pool_fini(&ui->hsegs);
    free(ui->gather);
    close(ui->fd);
    free(ui->rbufs);
    free(ui);
}

static tmx_status_t udp_address(tl_iface_t *iface, void *buf, size_t *len)
{
    udp_iface_t *ui = (udp_iface_t *)iface;
    udp_addr_t a = {ui->self_sa.sin_addr.s_addr, ui->self_sa.sin_port, 0, htole64(ui->job_key)};

    return tl_address_put(buf, len, &a, sizeof(a));
}

static tmx_status_t udp_reachable(tl_iface_t *iface, const void *addr, size_t len)
{
    udp_iface_t *ui = (udp_iface_t *)iface;
    udp_addr_t a;

    if (len != sizeof(a))
        return TMX_ERR_INVALID;
    memcpy(&a, addr, sizeof(a));
    return le64toh(a.job_key) == ui->job_key ? TMX_OK : TMX_ERR_UNREACHABLE;
}

/* ------------------------------------------------------------ endpoints */

/* Once per datagram: a hash lookup, not a scan of every peer. */
udp_ep_t *udp_ep_find(udp_iface_t *ui, uint64_t uuid)
{
    return util_idmap_get(&ui->ep_map, uuid);
}


/* Per-peer state is made on first contact either way (seed 002), and is
 * small while the peer is idle: the windows are allocated when the first
 * segment is sent, or arrives early. */
static udp_ep_t *ep_new(udp_iface_t *ui, uint64_t uuid, const struct sockaddr_in *sa)
{
    udp_ep_t *ep = calloc(1, sizeof(*ep));

    if (ep == NULL || util_idmap_put(&ui->ep_map, uuid, ep) != 0) {
        free(ep);
        return NULL;
    }
    ep->super.iface = &ui->super;
    ep->super.peer = TMX_PEER_NONE;
    ep->uuid = uuid;
    ep->sa = *sa;
    ep->fd = -1;
    ep->last_rx_us = udp_now_us();
    util_dlist_init(&ep->ack_link);
    for (int ch = 0; ch < UDP_N_CH; ch++)
        udp_tx_init(ui, ep, ch);
    util_dlist_push_tail(&ui->eps, &ep->link);
    ui->n_eps++;
    return ep;
}

/* A socket of its own for sending to a peer, bound to our address and
 * connected to the peer's: the kernel then keeps the route instead of
 * looking it up for every datagram, about 0.1 us of each one-way latency
 * between two namespaces. Its datagrams leave from another port than the
 * interface's, so every header names the port that replies go to. At
 * most conn_max of them (a descriptor each); beyond that, or when the
 * kernel refuses, the interface's socket sends. */
static void ep_connect(udp_iface_t *ui, udp_ep_t *ep)
{
    struct sockaddr_in me = ui->self_sa;
    int sz = UDP_SOCKBUF, fd;

    ep_disconnect(ui, ep);
    if (ui->n_conn >= ui->conn_max)
        return;
    me.sin_port = 0;
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        util_info("udp: no socket of its own for peer %u (%s): the shared one sends", ep->super.peer,
                  strerror(errno));
        return;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    if (bind(fd, (struct sockaddr *)&me, sizeof(me)) != 0 ||
        connect(fd, (struct sockaddr *)&ep->sa, sizeof(ep->sa)) != 0) {
        util_info("udp: cannot connect a socket to peer %u at %s:%u (%s): the shared one sends",
                  ep->super.peer, inet_ntoa(ep->sa.sin_addr), ntohs(ep->sa.sin_port), strerror(errno));
        close(fd);
        return;
    }
    udp_live_ep_socket(fd);
    ep->fd = fd;
    ui->n_conn++;
}

static tmx_status_t udp_ep_create(tl_iface_t *iface, const void *addr, size_t len, tmx_peer_t peer,
                                  uint64_t uuid, tl_ep_t **out)
{
    udp_iface_t *ui = (udp_iface_t *)iface;
    udp_ep_t *ep = udp_ep_find(ui, uuid);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    udp_addr_t a;
    tmx_status_t st = udp_reachable(iface, addr, len);

    if (st != TMX_OK)
        return st;
    memcpy(&a, addr, sizeof(a));
    sa.sin_addr.s_addr = a.ip;
    sa.sin_port = a.port;
    if (ep == NULL && (ep = ep_new(ui, uuid, &sa)) == NULL)
        return TMX_ERR_NOMEM;
    if (ep->failed)
        return TMX_ERR_PEER_FAILED;
    ep->super.peer = peer;
    ep->connected = 1;
    if (ep->fd < 0 || memcmp(&ep->sa, &sa, sizeof(sa)) != 0) {
        ep->sa = sa; /* the address published is the one that counts */
        ep_connect(ui, ep);
    }
    *out = &ep->super;
    return TMX_OK;
}

/* The endpoint stays until the interface closes: the peer may still be
 * owed ACKs or retransmissions. */
static void udp_ep_destroy(tl_ep_t *tep)
{
    ((udp_ep_t *)tep)->connected = 0;
}

static void ep_end(udp_iface_t *ui, udp_ep_t *ep, int clean)
{
    ep->failed = 1;
    ep_disconnect(ui, ep); /* nothing more goes to it: the descriptor is for the next peer */
    for (int ch = 0; ch < UDP_N_CH; ch++)
        util_timer_cancel(&ep->tx[ch].timer);
    udp_get_fail_ep(ui, ep);
    ui->super.fail_cb(ui->super.fail_arg, ep->uuid, clean);
}

void udp_ep_fail(udp_iface_t *ui, udp_ep_t *ep, const char *why)
{
    if (ep->failed)
        return;
    util_warn("udp: peer %u at %s:%u failed: %s", ep->super.peer, inet_ntoa(ep->sa.sin_addr),
              ntohs(ep->sa.sin_port), why);
    ep_end(ui, ep, 0);
}

void udp_ep_gone(udp_iface_t *ui, udp_ep_t *ep)
{
    if (ep->failed)
        return;
    util_debug("udp: peer %u at %s:%u closed its context", ep->super.peer, inet_ntoa(ep->sa.sin_addr),
               ntohs(ep->sa.sin_port));
    ep_end(ui, ep, 1);
}

/* A clean exit, told to every peer we talked with, so that its port's
 * refusal afterwards is not taken for a death (udp_live.c). One datagram,
 * not acknowledged: if it is lost, the refusal decides. */
static void bye_all(udp_iface_t *ui)
{
    util_dlist_t *pos;

    util_dlist_foreach(pos, &ui->eps) {
        udp_ep_t *ep = util_container_of(pos, udp_ep_t, link);
        if (!ep->failed && (ep->rx_data_seen || ep->tx[UDP_CH_DATA].next_seq != 0 ||
                            ep->tx[UDP_CH_PRIO].next_seq != 0))
            udp_bye_send(ui, ep);
    }
}

/* ----------------------------------------------------------------- send */

udp_seg_t *udp_seg_alloc(udp_iface_t *ui, size_t len)
{
    uint32_t pooled = len <= sizeof(udp_hdr_t) ? UDP_SEG_HDR_POOL
                      : len <= ui->seg_cap     ? UDP_SEG_POOL
                                               : UDP_SEG_MALLOC;
    udp_seg_t *seg = pooled == UDP_SEG_HDR_POOL ? util_pool_get(&ui->hsegs)
                     : pooled == UDP_SEG_POOL   ? util_pool_get(&ui->segs)
                                                : malloc(sizeof(*seg) + len);

    if (seg != NULL) {
        seg->pooled = pooled;
        seg->ext = NULL;
    }
    return seg; /* the rest is the caller's to set */
}

void udp_seg_free(udp_iface_t *ui, udp_seg_t *seg)
{
    if (seg->pooled == UDP_SEG_POOL)
        util_pool_put(&ui->segs, seg);
    else if (seg->pooled == UDP_SEG_HDR_POOL)
        util_pool_put(&ui->hsegs, seg);
    else
        free(seg);
}

/* A segment as the pieces of its datagram: the header, and the payload
 * when it is elsewhere. */
static inline int seg_iov(const udp_seg_t *seg, struct iovec *iov)
{
    if (seg->ext == NULL) {
        iov[0] = (struct iovec){(void *)seg->buf, seg->len};
        return 1;
    }
    iov[0] = (struct iovec){(void *)seg->buf, sizeof(udp_hdr_t)};
    iov[1] = (struct iovec){(void *)seg->ext, seg->len - sizeof(udp_hdr_t)};
    return 2;
}

/* One segment in one datagram, in its pieces. */
static void seg_send(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t *seg)
{
    struct iovec iov[2];

    if (seg->ext == NULL)
        udp_datagram_send(ui, ep, seg->buf, seg->len);
    else
        udp_datagram_sendv(ui, ep, iov, seg_iov(seg, iov), seg->len);
}

static void iov_gather(unsigned char *dst, const struct iovec *iov, int iovcnt, size_t off, size_t n)
{
    for (int i = 0; i < iovcnt && n > 0; i++) {
        size_t l = iov[i].iov_len, take;
        if (off >= l) {
            off -= l;
            continue;
        }
        take = l - off < n ? l - off : n;
        memcpy(dst, (const char *)iov[i].iov_base + off, take);
        dst += take;
        n -= take;
        off = 0;
    }
}

/* A new segment's header, written in place (a copy from the stack would
 * be read back in wider pieces than it was written). The ACKs and the
 * checksum come when it is sent (seg_stamp). */
static inline void hdr_fill(const udp_iface_t *ui, const udp_ep_t *ep, udp_seg_t *seg, int ch,
                            uint16_t flags, uint32_t frag_id, uint64_t offset, uint32_t aux, size_t n)
{
    udp_hdr_t *h = (udp_hdr_t *)seg->buf;

    seg->seq = ep->tx[ch].next_seq;
    seg->len = (uint32_t)(sizeof(*h) + n);
    seg->sacked = 0;
    seg->resent = 0;
    seg->ext = NULL; /* the payload follows the header (seg_build may say otherwise) */
    h->version = UDP_WIRE_VERSION;
    h->channel = (uint8_t)ch;
    h->flags = htole16(flags);
    h->len = htole16((uint16_t)n);
    h->port = ui->self_sa.sin_port;
    h->job_key = htole64(ui->job_key);
    h->src_id = htole64(ui->uuid);
    h->dst_id = htole64(ep->uuid);
    h->seq = htole32(seg->seq);
    h->frag_id = htole32(frag_id);
    h->offset = htole64(offset);
    h->csum = 0;
    h->reserved = htole32(aux);
}

/* zcopy: the payload stays where iov (one piece) has it, and is read
 * from there whenever the segment is sent. */
static udp_seg_t *seg_build(udp_iface_t *ui, udp_ep_t *ep, int ch, uint16_t flags, uint32_t frag_id,
                            uint64_t offset, uint32_t aux, const struct iovec *iov, int iovcnt,
                            size_t off, size_t n, int zcopy, uint64_t rkey)
{
    udp_seg_t *seg = udp_seg_alloc(ui, sizeof(udp_hdr_t) + (zcopy ? 0 : n));

    if (seg == NULL)
        return NULL;
    hdr_fill(ui, ep, seg, ch, flags, frag_id, offset, aux, n);
    if (zcopy && n > 0) {
        seg->ext = (const unsigned char *)iov[0].iov_base + off;
        seg->ext_key = rkey;
    } else
        iov_gather(seg->buf + sizeof(udp_hdr_t), iov, iovcnt, off, n);
    return seg;
}

static void seg_refuse(udp_seg_t *seg, tmx_status_t st)
{
    udp_hdr_t *h = (udp_hdr_t *)seg->buf;

    seg->ext = NULL;
    seg->len = sizeof(*h);
    h->len = 0;
    h->reserved = htole32((uint32_t)st);
}

/* Every waiting segment of memory under this key carries the refusal from
 * now on: one question to the core, not one per segment. */
static void refuse_key(const udp_iface_t *ui, const udp_ep_t *ep, uint64_t key, tmx_status_t st)
{
    const udp_tx_t *tx = &ep->tx[UDP_CH_DATA];

    for (uint32_t s = tx->una; s != tx->next_seq; s++) {
        udp_seg_t *seg = tx->win[udp_slot(ui, s)];
        if (seg != NULL && seg->ext != NULL && seg->ext_key == key)
            seg_refuse(seg, st);
    }
}

/* Stamps the current ACKs and the checksum into a segment. Read data
 * still in the owner's memory is read only if that memory is still lent:
 * the owner's send can fail while its segments wait (its peer declared
 * dead by other means, say), and the buffer is then the application's
 * again. The segment then carries the refusal instead, which ends the
 * reader's read. */
static void seg_stamp(const udp_iface_t *ui, const udp_ep_t *ep, udp_seg_t *seg)
{
    udp_hdr_t *h = (udp_hdr_t *)seg->buf;
    uint32_t c;
    tmx_status_t st;

    if (seg->ext != NULL &&
        (st = ui->super.mem_check(ui->super.recv_arg, (uintptr_t)seg->ext, seg->len - sizeof(*h), seg->ext_key)) !=
            TMX_OK) {
        refuse_key(ui, ep, seg->ext_key, st);
        if (seg->ext != NULL) /* every segment sent is in the window; this one too, whatever comes */
            seg_refuse(seg, st);
    }
    udp_hdr_fill_acks(ep, h);
    h->csum = 0;
    if (seg->ext == NULL)
        c = util_crc32c(0, seg->buf, seg->len);
    else
        c = util_crc32c(util_crc32c(0, seg->buf, sizeof(*h)), seg->ext, seg->len - sizeof(*h));
    h->csum = htole32(c);
}

/* Sends segments of equal size (the last may be shorter) in one system
 * call: the kernel cuts the buffer into datagrams (UDP GSO). 0 if the
 * kernel refused, so the caller sends them one by one. */
static int gso_send(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t **segs, size_t n)
{
    struct iovec iov[2 * UDP_GSO_MAX];
    char ctl[CMSG_SPACE(sizeof(uint16_t))] = {0};
    const struct sockaddr_in *sa;
    int fd = udp_ep_dest(ui, ep, &sa);
    struct msghdr mh = {(void *)sa, sa != NULL ? sizeof(*sa) : 0, iov, 0, ctl, sizeof(ctl), 0};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    uint16_t gso = (uint16_t)segs[0]->len;
    ssize_t r;

    for (size_t i = 0; i < n; i++)
        mh.msg_iovlen += (size_t)seg_iov(segs[i], iov + mh.msg_iovlen);
    cm->cmsg_level = SOL_UDP;
    cm->cmsg_type = UDP_SEGMENT;
    cm->cmsg_len = CMSG_LEN(sizeof(gso));
    memcpy(CMSG_DATA(cm), &gso, sizeof(gso));
    do {
        r = sendmsg(fd, &mh, 0);
    } while (r < 0 && errno == EINTR);
    if (r < 0 && (errno == EINVAL || errno == EIO || errno == ENOPROTOOPT || errno == EOPNOTSUPP)) {
        util_info("udp: the kernel refused GSO (%s); sending datagrams one by one", strerror(errno));
        ui->gso = 0;
        return 0;
    }
    if (r < 0)
        udp_live_send_error(ui, ep, fd, errno);
    return 1; /* a full buffer loses them all, like a loss: retransmission covers it */
}

/* Sends segments as one datagram each, up to UDP_GSO_MAX per system call
 * (sendmmsg). Through the fault injector, when it is on, one by one. */
static void dgrams_send(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t **segs, size_t n)
{
    struct mmsghdr mm[UDP_GSO_MAX];
    struct iovec iov[2 * UDP_GSO_MAX];
    const struct sockaddr_in *sa;
    int fd = udp_ep_dest(ui, ep, &sa);

    if (n == 1 || udp_faults_active(&ui->faults)) {
        for (size_t k = 0; k < n; k++)
            seg_send(ui, ep, segs[k]);
        return;
    }
    for (size_t i = 0; i < n;) {
        unsigned m = n - i < UDP_GSO_MAX ? (unsigned)(n - i) : UDP_GSO_MAX;
        int r;
        for (unsigned k = 0; k < m; k++) {
            size_t pieces = (size_t)seg_iov(segs[i + k], &iov[2 * k]);
            mm[k].msg_hdr = (struct msghdr){(void *)sa, sa != NULL ? sizeof(*sa) : 0, &iov[2 * k], pieces,
                                            NULL, 0, 0};
        }
        do {
            r = sendmmsg(fd, mm, m, 0);
        } while (r < 0 && errno == EINTR);
        if (r <= 0) {
            /* a full socket buffer loses the rest, like a loss */
            if (r < 0 && errno != EAGAIN && errno != ENOBUFS) {
                util_debug("udp: sendmmsg: %s", strerror(errno));
                udp_live_send_error(ui, ep, fd, errno);
            }
            return;
        }
        i += (size_t)r;
    }
}

/* Sends stamped segments: runs of equal size in one GSO send each when
 * the kernel takes them and no faults are injected, the rest batched. */
static void segs_send(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t **segs, size_t n)
{
    int batch = ui->gso && !udp_faults_active(&ui->faults);
    size_t i = 0, singles = 0; /* segs[i - singles .. i) wait to go */

    while (i < n) {
        size_t j = i + 1, bytes = segs[i]->len;
        while (batch && j < n && j - i < UDP_GSO_MAX && segs[j]->len <= segs[i]->len &&
               bytes + segs[j]->len <= UDP_MAX_DGRAM && segs[j - 1]->len == segs[i]->len)
            bytes += segs[j++]->len;
        if (j - i > 1) {
            if (singles > 0)
                dgrams_send(ui, ep, segs + i - singles, singles);
            singles = 0;
            if (!gso_send(ui, ep, segs + i, j - i)) {
                dgrams_send(ui, ep, segs + i, j - i);
                batch = 0;
            }
        } else {
            singles++;
        }
        i = j;
    }
    if (singles > 0)
        dgrams_send(ui, ep, segs + n - singles, singles);
}

/* Sends segments again, in one go: a loss found by SACK or a timeout
 * often covers many. */
void udp_segs_retransmit(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t **segs, size_t n)
{
    uint64_t now = udp_now_us();

    for (size_t k = 0; k < n; k++) {
        seg_stamp(ui, ep, segs[k]);
        segs[k]->sent_us = now;
        segs[k]->resent = 1;
    }
    ui->retransmits += n;
    segs_send(ui, ep, segs, n);
}

void udp_seg_retransmit(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t *seg)
{
    udp_segs_retransmit(ui, ep, &seg, 1);
}

/* Stamps and sends freshly built segments. */
static void segs_transmit(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t **segs, size_t n, uint64_t now)
{
    ui->segs_sent += n;
    for (size_t k = 0; k < n; k++) {
        seg_stamp(ui, ep, segs[k]);
        segs[k]->sent_us = segs[k]->first_sent_us = now;
    }
    segs_send(ui, ep, segs, n);
}

/* A segment went out carrying our current ACKs: none is owed any more. */
static inline void acks_carried(udp_ep_t *ep)
{
    if (ep->ack_queued) {
        util_dlist_unlink(&ep->ack_link);
        ep->ack_queued = 0;
        for (int c = 0; c < UDP_N_CH; c++)
            ep->rx[c].unacked = ep->rx[c].ack_now = 0;
    }
}

/* Cuts a packet into segments of one channel, all or nothing: if the window
 * cannot take every segment, nothing is sent and the caller retries.
 * Read data (GET_DATA) is not copied: its segments point into the owner's
 * memory, which stays until the reader's FIN, and the FIN comes after the
 * reader has every byte, its header acknowledging them all; a reader that
 * fails takes the segments' resending with it. */
tmx_status_t udp_send_segs(udp_iface_t *ui, udp_ep_t *ep, int ch, uint16_t flags,
                           uint32_t frag_id, uint64_t offset, uint32_t aux,
                           const struct iovec *iov, int iovcnt, size_t len, uint64_t rkey)
{
    size_t per = (ch == UDP_CH_PRIO ? UDP_PRIO_MTU : ui->mtu) - sizeof(udp_hdr_t);
    size_t nseg = len <= per ? 1 : (len + per - 1) / per;
    int whole = !(flags & UDP_FLAG_GET_DATA), zcopy = !whole && iovcnt == 1;
    udp_seg_t *batch[UDP_GSO_MAX];
    uint64_t now;

    if (ep->failed)
        return TMX_ERR_PEER_FAILED;
    ui->super.quiet = 0;
    if (ep->tx[ch].win == NULL && (ep->tx[ch].win = calloc(ui->window, sizeof(udp_seg_t *))) == NULL)
        return TMX_ERR_AGAIN;
    if (nseg > udp_tx_room(ui, &ep->tx[ch]))
        return TMX_ERR_AGAIN;
    now = udp_now_us(); /* one reading per send: in a VM it costs ~50 ns */
    for (size_t i = 0, nb = 0; i < nseg; i++) {
        size_t off = i * per, n = len - off < per ? len - off : per;
        uint16_t f = flags | (whole && i == 0 ? UDP_FLAG_FIRST : 0) | (whole && i == nseg - 1 ? UDP_FLAG_LAST : 0);
        udp_seg_t *seg = seg_build(ui, ep, ch, f, frag_id, whole ? (i == 0 ? len : off) : offset + off,
                                   aux, iov, iovcnt, off, n, zcopy, rkey);
        if (seg == NULL) {
            segs_transmit(ui, ep, batch, nb, now);
            return i == 0 ? TMX_ERR_AGAIN : TMX_ERR_NOMEM;
        }
        udp_tx_track(ui, ep, ch, seg, now);
        batch[nb++] = seg;
        if (nb == UDP_GSO_MAX || i == nseg - 1) {
            segs_transmit(ui, ep, batch, nb, now);
            nb = 0;
        }
    }
    acks_carried(ep);
    return TMX_OK;
}

/* The common case, a packet in one data segment (every short message):
 * the datagram is written straight into its segment and sent, and only
 * then recorded, so the bookkeeping is off the message's way. The send
 * time is read after the system call, which on this path includes the
 * kernel's delivery to a local peer: round trip samples are short by that
 * much, well inside the timeouts' floors. */
static tmx_status_t send_one(udp_iface_t *ui, udp_ep_t *ep, const struct iovec *iov, int iovcnt,
                             size_t len)
{
    udp_seg_t *seg = util_pool_get(&ui->segs);
    udp_hdr_t *h;
    uint64_t now;

    if (seg == NULL)
        return TMX_ERR_AGAIN;
    ui->super.quiet = 0;
    seg->pooled = UDP_SEG_POOL;
    hdr_fill(ui, ep, seg, UDP_CH_DATA, UDP_FLAG_FIRST | UDP_FLAG_LAST, 0, len, 0, len);
    h = (udp_hdr_t *)seg->buf;
    udp_hdr_fill_acks(ep, h);
    iov_gather(seg->buf + sizeof(*h), iov, iovcnt, 0, len); /* skips empty pieces, which may have no buffer */
    h->csum = htole32(util_crc32c(0, seg->buf, seg->len));
    udp_datagram_send(ui, ep, seg->buf, seg->len);
    now = udp_now_us();
    seg->sent_us = seg->first_sent_us = now;
    ui->segs_sent++;
    udp_tx_track(ui, ep, UDP_CH_DATA, seg, now);
    acks_carried(ep);
    return TMX_OK;
}

static tmx_status_t udp_send(tl_ep_t *tep, const struct iovec *iov, int iovcnt)
{
    udp_ep_t *ep = (udp_ep_t *)tep;
    udp_iface_t *ui = (udp_iface_t *)tep->iface;
    udp_tx_t *tx = &ep->tx[UDP_CH_DATA];
    size_t len = 0;

    for (int i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    if (len == 0) {
        util_error("udp: empty packet refused (1 to %d bytes)", UDP_MAX_PACKET);
        return TMX_ERR_INVALID;
    }
    if (len <= ui->mtu - sizeof(udp_hdr_t) && tx->win != NULL && !ep->failed &&
        tx->next_seq - tx->una < ui->window)
        return send_one(ui, ep, iov, iovcnt, len);
    if (len > UDP_MAX_PACKET) {
        util_error("udp: packet of %zu bytes exceeds %d", len, UDP_MAX_PACKET);
        return TMX_ERR_INVALID;
    }
    return udp_send_segs(ui, ep, UDP_CH_DATA, 0, 0, 0, 0, iov, iovcnt, len, 0);
}

/* -------------------------------------------------------------- receive */

static int dgram_drop(udp_iface_t *ui, const char *why, size_t len)
{
    ui->dropped++;
    util_debug("udp: dropped a %zu-byte datagram: %s", len, why);
    return -1;
}

/* Checks a datagram before any of it is trusted; converts the header. */
static int dgram_parse(udp_iface_t *ui, unsigned char *buf, size_t len, udp_hdr_t *h)
{
    uint32_t csum;

    if (len < sizeof(*h))
        return dgram_drop(ui, "shorter than a header", len);
    memcpy(h, buf, sizeof(*h));
    csum = le32toh(h->csum);
    memset(buf + offsetof(udp_hdr_t, csum), 0, sizeof(h->csum));
    if (util_crc32c(0, buf, len) != csum)
        return dgram_drop(ui, "bad checksum", len);
    h->flags = le16toh(h->flags);
    h->len = le16toh(h->len);
    h->job_key = le64toh(h->job_key);
    h->src_id = le64toh(h->src_id);
    h->dst_id = le64toh(h->dst_id);
    h->seq = le32toh(h->seq);
    for (int ch = 0; ch < UDP_N_CH; ch++)
        h->ack[ch] = le32toh(h->ack[ch]);
    h->frag_id = le32toh(h->frag_id);
    h->offset = le64toh(h->offset);
    if (h->version != UDP_WIRE_VERSION || h->channel >= UDP_N_CH || (h->flags & ~UDP_FLAG_MASK) || h->port == 0 ||
        h->len != len - sizeof(*h))
        return dgram_drop(ui, "malformed header", len);
    if (h->job_key != ui->job_key)
        return dgram_drop(ui, "another job's key", len);
    if (h->dst_id != ui->uuid)
        return dgram_drop(ui, "addressed to another context", len);
    return 0;
}

void udp_dgram_input(udp_iface_t *ui, unsigned char *buf, size_t len, const struct sockaddr_in *from)
{
    udp_hdr_t h;
    udp_ep_t *ep;

    if (dgram_parse(ui, buf, len, &h) != 0)
        return;
    ep = udp_ep_find(ui, h.src_id);
    if (ep == NULL && ui->n_eps < UDP_MAX_EPS) {
        struct sockaddr_in sa = *from;
        sa.sin_port = h.port; /* not the port it left from: see udp_wire.h */
        ep = ep_new(ui, h.src_id, &sa);
    }
    if (ep == NULL) {
        dgram_drop(ui, "no room for a new peer", len);
        return;
    }
    if (ep->failed) {
        dgram_drop(ui, "peer declared failed", len);
        return;
    }
    ep->last_rx_us = ui->rx_now_us;
    udp_live_heard(ep);
    for (int ch = 0; ch < UDP_N_CH; ch++)
        udp_tx_acked(ui, ep, ch, h.ack[ch]);
    if (h.flags & UDP_FLAG_SACK)
        udp_tx_sacked(ui, ep, buf + sizeof(h), h.len);
    if (h.flags & UDP_FLAG_STALL)
        udp_tx_stalled(ui, ep, h.seq);
    if ((h.flags & UDP_FLAG_BYE) && (h.flags & UDP_FLAG_ACK_ONLY)) {
        uint32_t next[UDP_N_CH] = {[UDP_CH_PRIO] = h.seq, [UDP_CH_DATA] = h.frag_id};
        udp_live_bye(ui, ep, next);
        return;
    }
    if (!(h.flags & UDP_FLAG_ACK_ONLY))
        udp_rx_segment(ui, ep, &h, buf + sizeof(h));
    if (ep->bye && !ep->failed)
        udp_live_bye_check(ui, ep); /* the data a bye overtook */
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

void udp_buf_input(udp_iface_t *ui, unsigned char *buf, size_t len, size_t gro,
                   const struct sockaddr_in *from)
{
    if (gro == 0 || gro >= len) {
        udp_dgram_input(ui, buf, len, from);
        return;
    }
    for (size_t off = 0; off < len; off += gro)
        udp_dgram_input(ui, buf + off, len - off < gro ? len - off : gro, from);
}

static void rmsg_reset(udp_iface_t *ui, int i)
{
    ui->rmsgs[i].msg_hdr = (struct msghdr){&ui->rfrom[i], sizeof(ui->rfrom[i]), &ui->riov[i], 1,
                                           ui->rctl[i], sizeof(ui->rctl[i]), 0};
}

static void rmsgs_init(udp_iface_t *ui)
{
    for (int i = 0; i < UDP_RECV_BATCH; i++) {
        ui->riov[i] = (struct iovec){ui->rbufs + (size_t)i * 65536, 65536};
        rmsg_reset(ui, i);
    }
}

/* The size of the datagrams coalesced into a buffer read without the
 * kernel's note of it: GRO joins only datagrams of one size (the last may
 * be shorter), so the first header's length gives it. A header that lies
 * only cuts the buffer wrongly, and the checksums then drop the pieces. */
size_t udp_gro_guess(const unsigned char *buf, size_t len)
{
    udp_hdr_t h;
    size_t first;

    if (len < sizeof(h))
        return 0;
    memcpy(&h, buf, sizeof(h));
    first = sizeof(h) + le16toh(h.len);
    return first < len ? first : 0;
}

/* With IP_RECVERR, an ICMP error (a refusal, an unreachable host) is
 * reported by the next read, its details waiting in the error queue
 * (udp_live.c, which acts on refusals only). */
static void recv_error(udp_iface_t *ui, const char *call)
{
    if (errno == EAGAIN || errno == EINTR)
        return;
    util_debug("udp: %s: %s", call, strerror(errno));
    udp_live_send_error(ui, NULL, ui->fd, errno);
}

/* One datagram by recvfrom, the cheapest read there is (no message
 * header or control data to copy in and out). */
static int recv_one(udp_iface_t *ui)
{
    socklen_t fl = sizeof(ui->rfrom[0]);
    ssize_t n = recvfrom(ui->fd, ui->rbufs, 65536, MSG_DONTWAIT, (struct sockaddr *)&ui->rfrom[0], &fl);

    if (n < 0) {
        recv_error(ui, "recvfrom");
        ui->recv_streak = 0;
        return 0;
    }
    if (++ui->recv_streak >= 2) /* a stream, not a ping-pong: batch */
        ui->recv_vlen = UDP_RECV_BATCH;
    ui->rx_now_us = udp_now_us();
    ui->dgrams_in++;
    udp_buf_input(ui, ui->rbufs, (size_t)n, udp_gro_guess(ui->rbufs, (size_t)n), &ui->rfrom[0]);
    return 1;
}

/* Reads one datagram while they come one at a time (a ping-pong), since
 * recvmmsg looks for a second before it returns, which delays the answer.
 * Two polls in a row that each found one switch to batches, and a batch
 * that brings two or more keeps the batches. */
static int recv_batch(udp_iface_t *ui)
{
    unsigned vlen = ui->recv_vlen;
    int n, bulk;

    if (vlen == 1)
        return recv_one(ui);
    n = recvmmsg(ui->fd, ui->rmsgs, vlen, MSG_DONTWAIT, NULL);
    if (n < 0) {
        recv_error(ui, "recvmmsg");
        ui->recv_vlen = 1;
        ui->recv_streak = 0;
        return 0;
    }
    if (n == 1) {
        ui->recv_vlen = 1;
        ui->recv_streak = 0;
    }
    bulk = n >= 2;
    ui->rx_now_us = udp_now_us();
    ui->dgrams_in += (uint64_t)n;
    for (int i = 0; i < n; i++) {
        unsigned char *buf = ui->riov[i].iov_base;
        size_t len = ui->rmsgs[i].msg_len, gro = gro_size(&ui->rmsgs[i].msg_hdr);
        bulk |= gro != 0;
        /* a burst joined while GRO was on comes without the note once it is off */
        if (gro == 0)
            gro = udp_gro_guess(buf, len);
        udp_buf_input(ui, buf, len, gro, &ui->rfrom[i]);
        rmsg_reset(ui, i);
    }
    if (bulk) { /* a stream, or a burst GRO joined */
        ui->gro_used_us = ui->rx_now_us;
        udp_gro_set(ui, 1);
    }
    return n;
}

/* A receive costs a system call, and reading the clock is not free
 * either (tens of ns in a VM). While udp carries nothing (peers on this
 * host talk over shm) and has nothing pending, it tells the core it is
 * quiet, and is polled only once in TL_QUIET_POLL_EVERY polls, so that
 * udp's presence does not slow the shm fast path; once a datagram
 * arrives, every poll looks, for the next UDP_HOT_POLLS polls. */
static int udp_idle(const udp_iface_t *ui)
{
    if (ui->hot_polls != 0 || __atomic_load_n(&ui->woken, __ATOMIC_RELAXED))
        return 0;
    /* without peers there are no timers, ACKs, reads or held datagrams */
    return ui->n_eps == 0 ||
           (ui->wheel.n_armed == 0 && util_dlist_empty(&ui->acks) && util_dlist_empty(&ui->gets) &&
            util_dlist_empty(&ui->serves) && ui->faults.held == NULL);
}

/* The longest a wait may sleep for what is pending now: ACKs and
 * retransmissions fall due while asleep, so wake for the earliest, to
 * the wheel's tick while a retransmit timer runs or a read waits, else
 * every millisecond. Computed under the lock by each progress, for
 * udp_wait, which may not look at that state itself (tl.h, "Threads"). */
static void wait_cap_update(udp_iface_t *ui)
{
    int64_t cap = ui->wheel.n_armed > 0 || !util_dlist_empty(&ui->gets) ? UDP_TICK_US : 1000;

    if ((!util_dlist_empty(&ui->acks) || ui->faults.held != NULL) && (int64_t)ui->ack_delay_us < cap)
        cap = (int64_t)ui->ack_delay_us;
    __atomic_store_n(&ui->wait_cap_us, cap, __ATOMIC_RELAXED);
}

static int udp_progress(tl_iface_t *iface)
{
    udp_iface_t *ui = (udp_iface_t *)iface;
    uint64_t now;
    int events = 0, n;

    if (__atomic_load_n(&ui->woken, __ATOMIC_RELAXED)) {
        __atomic_store_n(&ui->woken, 0, __ATOMIC_RELAXED);
        ui->hot_polls = UDP_HOT_POLLS;
        if (__atomic_exchange_n(&ui->errq_woken, 0, __ATOMIC_RELAXED))
            ui->errq = 1;
    }
    if (ui->hot_polls > 0)
        ui->hot_polls--;
    /* a batch short of full emptied the socket: another call would only
     * cost a system call before the caller sees what arrived */
    do {
        n = recv_batch(ui);
        events += n;
    } while (n == UDP_RECV_BATCH && events < 4 * UDP_RECV_BATCH);
    /* timers run in UDP_TICK_US ticks: an empty poll need not read the
     * clock each time */
    if (events > 0) {
        ui->hot_polls = UDP_HOT_POLLS;
        now = ui->poll_now_us = ui->rx_now_us;
    } else if ((++ui->clock_polls & (UDP_CLOCK_POLL_EVERY - 1)) == 0 ||
               __atomic_exchange_n(&ui->slept, 0, __ATOMIC_RELAXED)) {
        now = ui->poll_now_us = udp_now_us(); /* after a sleep, timers are due */
    } else {
        now = ui->poll_now_us;
    }
    if (!util_dlist_empty(&ui->gets) || !util_dlist_empty(&ui->serves))
        events += udp_get_progress(ui, now);
    if (ui->gro_on) {
        if (!util_dlist_empty(&ui->gets))
            ui->gro_used_us = now;
        else if (now > ui->gro_used_us + UDP_GRO_IDLE_US)
            udp_gro_set(ui, 0);
    }
    if (ui->wheel.n_armed > 0)
        events += util_wheel_expire(&ui->wheel, now);
    if (ui->n_left != 0 && !ui->super.rx_full)
        udp_rx_resume(ui);
    if (!util_dlist_empty(&ui->acks))
        udp_ack_flush(ui, now);
    if (ui->faults.held != NULL)
        udp_datagram_send(ui, NULL, NULL, 0);
    if (ui->errq || ui->refusals || ui->byes)
        udp_live_progress(ui);
    iface->quiet = udp_idle(ui);
    wait_cap_update(ui);
    return events;
}

/* The kernel's receive work needs the CPU, so a waiter sleeps in poll
 * rather than spinning (blocking beats spinning across namespaces). Runs
 * unlocked, beside any other operation: it reads only the socket, fixed
 * from iface_open on, and writes only atomic flags. */
static void udp_wait(tl_iface_t *iface, int64_t timeout_us)
{
    udp_iface_t *ui = (udp_iface_t *)iface;
    struct pollfd pfd = {ui->fd, POLLIN, 0};
    int64_t t = timeout_us, cap = __atomic_load_n(&ui->wait_cap_us, __ATOMIC_RELAXED);
    struct timespec ts;

    if (t < 0 || t > cap)
        t = cap;
    ts.tv_sec = t / 1000000;
    ts.tv_nsec = (t % 1000000) * 1000;
    if (ppoll(&pfd, 1, &ts, NULL) > 0 && (pfd.revents & (POLLIN | POLLERR))) {
        if (pfd.revents & POLLERR) /* a refusal queued (udp_live.c) */
            __atomic_store_n(&ui->errq_woken, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&ui->woken, 1, __ATOMIC_RELAXED); /* the next poll reads it */
    }
    __atomic_store_n(&ui->slept, 1, __ATOMIC_RELAXED); /* and reads the clock */
}

/* Called while someone waits: keepalives to silent peers, and the
 * kernel's refusals read (udp_live.c). */
static void udp_check_peers(tl_iface_t *iface)
{
    udp_live_check((udp_iface_t *)iface, udp_now_us());
}

const tl_ops_t tl_udp_ops = {
    .name = "udp",
    .iface_open = udp_iface_open,
    .iface_close = udp_iface_close,
    .address = udp_address,
    .reachable = udp_reachable,
    .ep_create = udp_ep_create,
    .ep_destroy = udp_ep_destroy,
    .send = udp_send,
    .get = udp_get,
    .progress = udp_progress,
    .wait = udp_wait,
    .check_peers = udp_check_peers,
};
