/*
 * Peer liveness for the udp transport. A peer that does not answer is
 * usually busy, not dead: a rank computing for a minute without calling
 * tmx, or one of many ranks sharing a core, answers nothing while it is
 * perfectly alive. So silence alone kills a peer only after a long limit
 * (TMX_UDP_PEER_TIMEOUT_MS, meant for a host that vanished: no process,
 * no kernel, nothing answers), and death is otherwise declared on
 * evidence from the kernel: a process that exited or was killed no longer
 * has its port, and the peer's kernel refuses our next datagram with an
 * ICMP port unreachable. A socket connected to the peer reports it as
 * ECONNREFUSED; the shared socket, with IP_RECVERR, queues it with the
 * destination that refused (MSG_ERRQUEUE).
 *
 * To collect that evidence, a peer silent for UDP_PROBE_MIN_US (or a
 * quarter of the silence limit, if shorter) is sent a keepalive (a
 * reliable empty segment), whose retransmissions then probe at intervals
 * that grow with the silence, up to UDP_PROBE_MAX_US (see
 * udp_probe_interval): a busy peer costs a datagram every few seconds,
 * and a killed one is found within a probe interval. A peer that answers
 * is probed once a second at most while someone waits, as before: more
 * often would cost a job of many ranks thousands of datagrams a second
 * while it is idle.
 */
#include <errno.h>
#include <time.h> /* before linux/errqueue.h, which uses struct timespec */
#include <linux/errqueue.h>
#include <netinet/ip.h>
#include <string.h>
#include <sys/socket.h>

#include "tl/udp/udp.h"
#include "util/log.h"

#define UDP_PROBE_MIN_US 1000000  /* silence before the first keepalive */
#define UDP_PROBE_MAX_US 5000000  /* the longest between two probes */
#define UDP_ERRQ_BATCH 256        /* error queue entries read per progress */

uint64_t udp_probe_interval(uint64_t silence_us)
{
    uint64_t t = silence_us / 8;

    return t < UDP_PROBE_MIN_US ? UDP_PROBE_MIN_US : t > UDP_PROBE_MAX_US ? UDP_PROBE_MAX_US : t;
}

void udp_live_socket(udp_iface_t *ui)
{
    int one = 1;

    if (setsockopt(ui->fd, IPPROTO_IP, IP_RECVERR, &one, sizeof(one)) != 0)
        util_info("udp: no IP_RECVERR (%s): peers reached through the shared socket are found dead "
                  "by silence only", strerror(errno));
}

void udp_live_send_error(udp_iface_t *ui, udp_ep_t *ep, int fd, int err)
{
    if (ep != NULL && fd >= 0 && fd == ep->fd) {
        if (err != ECONNREFUSED)
            return; /* an unreachable host is not a dead process */
        ep->refused = 1;
        ui->refusals = 1;
    } else {
        ui->errq = 1; /* the shared socket: its error queue names the peer */
    }
}

static udp_ep_t *ep_by_addr(udp_iface_t *ui, const struct sockaddr_in *sa)
{
    util_dlist_t *pos;

    util_dlist_foreach(pos, &ui->eps) {
        udp_ep_t *ep = util_container_of(pos, udp_ep_t, link);
        if (ep->sa.sin_addr.s_addr == sa->sin_addr.s_addr && ep->sa.sin_port == sa->sin_port)
            return ep;
    }
    return NULL;
}

/* One entry of the shared socket's error queue: 1 if one was read. */
static int errq_read_one(udp_iface_t *ui)
{
    struct sockaddr_in dst;
    char ctl[CMSG_SPACE(sizeof(struct sock_extended_err) + sizeof(struct sockaddr_in))];
    char byte;
    struct iovec iov = {&byte, 1};
    struct msghdr mh = {&dst, sizeof(dst), &iov, 1, ctl, sizeof(ctl), 0};
    struct cmsghdr *cm;

    if (recvmsg(ui->fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
        return 0;
    for (cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
        const struct sock_extended_err *ee = (const void *)CMSG_DATA(cm);
        udp_ep_t *ep;
        if (cm->cmsg_level != IPPROTO_IP || cm->cmsg_type != IP_RECVERR ||
            ee->ee_origin != SO_EE_ORIGIN_ICMP || ee->ee_errno != ECONNREFUSED ||
            mh.msg_namelen < sizeof(dst) || (ep = ep_by_addr(ui, &dst)) == NULL)
            continue;
        ep->refused = 1;
        ui->refusals = 1;
    }
    return 1;
}

/* The error of a socket connected to ep, read and cleared. */
static void ep_error_read(udp_iface_t *ui, udp_ep_t *ep)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (ep->fd >= 0 && getsockopt(ep->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0)
        udp_live_send_error(ui, ep, ep->fd, err);
}

/* Declares dead every peer the kernel refused. Runs from progress. */
void udp_live_progress(udp_iface_t *ui)
{
    util_dlist_t *pos;

    if (ui->errq) {
        int n = 0;
        while (n < UDP_ERRQ_BATCH && errq_read_one(ui))
            n++;
        ui->errq = n == UDP_ERRQ_BATCH; /* more next time */
    }
    if (!ui->refusals)
        return;
    ui->refusals = 0;
    util_dlist_foreach(pos, &ui->eps) {
        udp_ep_t *ep = util_container_of(pos, udp_ep_t, link);
        if (ep->refused && !ep->failed)
            udp_ep_fail(ui, ep, "its host refused its port: the process is gone");
    }
}

/* A keepalive to a silent peer, a reliable empty segment on the priority
 * channel: its retransmissions are the next probes. */
static void ep_probe(udp_iface_t *ui, udp_ep_t *ep, uint64_t now)
{
    udp_tx_t *tx = &ep->tx[UDP_CH_PRIO];

    ep->probe_us = now;
    ep_error_read(ui, ep);
    if (tx->una == tx->next_seq)
        udp_send_segs(ui, ep, UDP_CH_PRIO, 0, 0, 0, 0, NULL, 0, 0, 0);
}

void udp_live_check(udp_iface_t *ui, uint64_t now)
{
    util_dlist_t *pos;
    uint64_t first = ui->peer_timeout_us / 4 < UDP_PROBE_MIN_US ? ui->peer_timeout_us / 4 : UDP_PROBE_MIN_US;

    ui->errq = 1; /* one system call when the queue is empty */
    util_dlist_foreach(pos, &ui->eps) {
        udp_ep_t *ep = util_container_of(pos, udp_ep_t, link);
        uint64_t silence = now > ep->last_rx_us ? now - ep->last_rx_us : 0;
        if (ep->failed || !ep->connected || silence < first ||
            now - ep->probe_us < udp_probe_interval(silence))
            continue;
        ep_probe(ui, ep, now);
    }
    udp_live_progress(ui);
}
