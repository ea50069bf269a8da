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

    if (setsockopt(ui->sock.fd, IPPROTO_IP, IP_RECVERR, &one, sizeof(one)) != 0)
        util_info("udp: no IP_RECVERR (%s): peers reached through the shared socket are found dead "
                  "by silence only", strerror(errno));
}

/* A refusal counts only if it quotes one of our datagrams to that peer:
 * the job key and both contexts of the tmx header (the kernel quotes the
 * refused datagram, far more than its first 8 bytes). An ICMP message
 * carries no secret of ours, so even then it is only a reason to probe:
 * the peer is declared dead after UDP_REFUSALS_DEAD of them, each at least
 * a timeout after the one before, with nothing heard from it between
 * (udp_live_heard). A live peer answers the probes; a dead one's kernel
 * refuses each, and it is found within a few timeouts. */
#define UDP_REFUSALS_DEAD 3
#define UDP_BYE_WAIT_US 200000   /* how long a bye waits for data it overtook */

void udp_live_ep_socket(int fd)
{
    int one = 1;

    (void)setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof(one)); /* else SO_ERROR, unchecked: ignored */
}

void udp_live_send_error(udp_iface_t *ui, udp_ep_t *ep, int fd, int err)
{
    udp_conn_t *c = ep != NULL && ep->sock ? udp_ep_conn(ui, ep) : NULL;

    if (err != ECONNREFUSED && err != EHOSTUNREACH && err != ENETUNREACH)
        return;
    if (c != NULL && fd == c->fd)
        c->errq = 1; /* its error queue quotes what was refused */
    ui->sock.errq = 1;
}

void udp_live_heard(udp_ep_t *ep)
{
    if (ep->has_flow)
        ep->flow->n_refused = 0;
}

/* How long ago ep was last probed while silent, at least: a probe that
 * was answered is older than the answer (silence_us ago); its flow, where
 * the time of it is kept, may be gone since. */
static uint64_t probe_age(const udp_ep_t *ep, uint64_t now, uint64_t silence_us)
{
    const udp_flow_t *fl = udp_ep_flow(ep);

    if (fl != NULL && fl->probed)
        return udp_live_age(now, fl->probe);
    return ep->probed ? silence_us : UINT64_MAX;
}

static void ep_refused(udp_iface_t *ui, udp_ep_t *ep, uint64_t now)
{
    udp_flow_t *fl = udp_ep_flow(ep);

    if (ep->failed || (fl != NULL && fl->n_refused > 0 && now - fl->refused_us < udp_rto_base(ui, ep)))
        return; /* the same probe refused twice, or a burst of forgeries */
    if ((fl = udp_flow(ui, ep)) == NULL || fl->n_refused == UINT8_MAX)
        return;
    fl->n_refused++;
    fl->refused_us = now;
    fl->refused = 1;
    ui->refusals = 1;
}

void udp_live_nobody(udp_iface_t *ui, uint64_t uuid)
{
    udp_ep_t *ep = udp_ep_find(ui, uuid);

    if (ep != NULL)
        ep_refused(ui, ep, ui->rx_now_us);
}

/* The endpoint a refused datagram was for: it must be ours (the job key,
 * our context, a wire version we speak: the kernel quotes the refused
 * datagram, far more than its first 8 bytes) and go to the address that
 * refused it. Several peers may share an address (a port per node): the
 * quote's destination context tells them apart. */
static udp_ep_t *quote_ep(udp_iface_t *ui, const unsigned char *q, ssize_t n, const struct sockaddr_in *dst)
{
    const struct sockaddr_in *sa;
    udp_ep_t *ep;
    udp_hdr_t h;

    if (n < (ssize_t)sizeof(h))
        return NULL;
    memcpy(&h, q, sizeof(h));
    if (h.version != UDP_WIRE_VERSION || le64toh(h.job_key) != ui->job_key || le64toh(h.src_id) != ui->uuid)
        return NULL;
    ep = udp_ep_find(ui, le64toh(h.dst_id));
    if (ep == NULL || ep->failed)
        return NULL;
    sa = &udp_ep_conn(ui, ep)->sa;
    return sa->sin_addr.s_addr == dst->sin_addr.s_addr && sa->sin_port == dst->sin_port ? ep : NULL;
}

/* One entry of fd's error queue (the shared socket's, or a connected
 * socket's): 1 if one was read. */
static int errq_read_one(udp_iface_t *ui, int fd)
{
    struct sockaddr_in dst;
    char ctl[CMSG_SPACE(sizeof(struct sock_extended_err) + sizeof(struct sockaddr_in))];
    unsigned char quote[sizeof(udp_hdr_t)];
    struct iovec iov = {quote, sizeof(quote)};
    struct msghdr mh = {&dst, sizeof(dst), &iov, 1, ctl, sizeof(ctl), 0};
    struct cmsghdr *cm;
    ssize_t n = recvmsg(fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT);

    if (n < 0)
        return 0;
    for (cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
        const struct sock_extended_err *ee = (const void *)CMSG_DATA(cm);
        udp_ep_t *ep;
        if (cm->cmsg_level != IPPROTO_IP || cm->cmsg_type != IP_RECVERR ||
            ee->ee_origin != SO_EE_ORIGIN_ICMP || ee->ee_errno != ECONNREFUSED)
            continue;
        if (mh.msg_namelen < sizeof(dst) || (ep = quote_ep(ui, quote, n, &dst)) == NULL) {
            ui->stats.refusals_bad++;
            util_debug("udp: a refusal quotes no datagram of ours to a peer at that address: ignored");
            continue;
        }
        ep_refused(ui, ep, udp_now_us());
    }
    return 1;
}

/* The error queues that may hold refusals, a batch at most. */
static void errq_read(udp_iface_t *ui)
{
    udp_conn_t *c;
    int n = 0;

    while (n < UDP_ERRQ_BATCH && errq_read_one(ui, ui->sock.fd))
        n++;
    ui->sock.errq = n == UDP_ERRQ_BATCH; /* more next time */
    for (uint32_t it = 0; (c = util_idmap_next(&ui->sock.conns, &it)) != NULL;) {
        if (c->fd < 0 || !c->errq)
            continue;
        c->errq = 0;
        for (n = 0; n < UDP_ERRQ_BATCH && errq_read_one(ui, c->fd); n++)
            ;
    }
}

static void ep_probe(udp_iface_t *ui, udp_ep_t *ep, uint64_t now);

/* A peer refused: probed again a timeout later, failed when refusals
 * persist. 1 while it is still being probed. */
static int ep_refusal_step(udp_iface_t *ui, udp_ep_t *ep, uint64_t now)
{
    udp_flow_t *fl = udp_ep_flow(ep);

    if (ep->failed || fl == NULL || fl->n_refused == 0)
        return 0;
    if (fl->n_refused >= UDP_REFUSALS_DEAD) {
        udp_ep_fail(ui, ep, "its host refused its port again and again: the process is gone");
        return 0;
    }
    if (fl->refused || now - fl->refused_us >= udp_rto_base(ui, ep)) {
        if (fl->refused || probe_age(ep, now, udp_ep_silence(ep, now)) >= udp_rto_base(ui, ep))
            ep_probe(ui, ep, now);
        fl->refused = 0; /* the flow stays: n_refused holds it */
    }
    return 1;
}

/* A bye whose data has not all arrived waits UDP_BYE_WAIT_US for it (a
 * bye from the shared socket may overtake data from a connected one):
 * then the data cannot come any more, and the exit was not clean for us.
 * 1 while it still waits. */
static int ep_bye_step(udp_iface_t *ui, udp_ep_t *ep, uint64_t now)
{
    if (!udp_ep_bye(ep) || ep->failed)
        return 0;
    if (now - ep->flow->bye_us < UDP_BYE_WAIT_US)
        return 1;
    udp_ep_fail(ui, ep, "it closed with data it sent us missing");
    return 0;
}

/* Reads refusals, probes the peers refused, fails those that stay
 * refused, and ends the byes that waited long enough. From progress. */
void udp_live_progress(udp_iface_t *ui)
{
    uint64_t now;
    int refusals = 0, byes = 0;

    if (ui->sock.errq)
        errq_read(ui);
    if (!ui->refusals && !ui->byes)
        return;
    now = udp_now_us();
    /* a refused peer and a bye keep their flow (udp_flow_settle) */
    for (udp_flow_t *fl = udp_flow_walk(ui, NULL); fl != NULL; fl = udp_flow_walk(ui, fl)) {
        udp_ep_t *ep = fl->ep;
        refusals += ep_refusal_step(ui, ep, now);
        byes += ep_bye_step(ui, ep, now);
    }
    ui->refusals = refusals != 0;
    ui->byes = byes;
}

static int bye_complete(const udp_ep_t *ep, const uint32_t next_seq[UDP_N_CH])
{
    for (int ch = 0; ch < UDP_N_CH; ch++)
        if ((int32_t)(udp_ep_expected(ep, ch) - next_seq[ch]) < 0)
            return 0;
    return 1;
}

void udp_live_bye(udp_iface_t *ui, udp_ep_t *ep, const uint32_t next_seq[UDP_N_CH])
{
    udp_flow_t *fl;

    for (int ch = 0; ch < UDP_N_CH; ch++) {
        if ((int32_t)(udp_ep_expected(ep, ch) - next_seq[ch]) > 0) {
            /* it names fewer segments than have come: not its sender's */
            util_debug("udp: a bye for peer %016llx names segment %u on channel %d, below the %u that came: "
                       "ignored", (unsigned long long)ep->super.uuid, next_seq[ch], ch, udp_ep_expected(ep, ch));
            ui->stats.dropped++;
            return;
        }
    }
    if (!udp_ep_bye(ep)) {
        if (bye_complete(ep, next_seq)) {
            udp_ep_gone(ui, ep);
            return;
        }
        if ((fl = udp_flow(ui, ep)) == NULL)
            return; /* no memory to wait for its data: its refusal decides */
        fl->bye = 1;
        fl->bye_us = ui->rx_now_us ? ui->rx_now_us : udp_now_us();
        memcpy(fl->bye_seq, next_seq, sizeof(fl->bye_seq));
    }
    udp_live_bye_check(ui, ep);
}

void udp_live_bye_check(udp_iface_t *ui, udp_ep_t *ep)
{
    if (bye_complete(ep, ep->flow->bye_seq)) {
        ep->flow->bye = 0;
        udp_ep_gone(ui, ep);
        return;
    }
    ui->byes++; /* recounted by udp_live_progress */
}

/* A keepalive to a silent peer, a reliable empty segment on the priority
 * channel: its retransmissions are the next probes. */
static void ep_probe(udp_iface_t *ui, udp_ep_t *ep, uint64_t now)
{
    int made = !ep->has_flow;
    udp_flow_t *fl = udp_flow(ui, ep);
    udp_tx_t *tx;
    udp_send_desc_t keepalive = {.ch = UDP_CH_PRIO}; /* an empty segment, acknowledged */

    if (fl == NULL)
        return; /* no memory now: the next check probes */
    fl->probe = udp_live_stamp(now);
    fl->probed = 1;
    ep->probed = 1;
    tx = &fl->tx[UDP_CH_PRIO];
    if (ep->sock) /* a refusal pending there would eat the probe */
        udp_ep_conn(ui, ep)->errq = ui->sock.errq = 1;
    if (ui->sock.errq)
        errq_read(ui);
    /* a refused peer gets a new segment even if one is outstanding: the
     * answer to it, or its refusal, decides */
    if ((tx->una == tx->next_seq || fl->n_refused > 0) && udp_send_segs(ui, ep, &keepalive) != TMX_OK &&
        made && ep->has_flow)
        udp_flow_settle(ui, ep); /* made for the probe alone, which did not go */
}

void udp_live_check(udp_iface_t *ui, uint64_t now)
{
    udp_ep_t *ep;
    uint64_t first = ui->cfg.peer_timeout_us / 4 < UDP_PROBE_MIN_US ? ui->cfg.peer_timeout_us / 4 : UDP_PROBE_MIN_US;

    ui->sock.errq = 1; /* one system call when the queue is empty */
    udp_node_check(ui, now, 0); /* the node's processes that died */
    for (uint32_t it = 0; (ep = udp_ep_next(ui, &it)) != NULL;) {
        uint64_t silence = udp_ep_silence(ep, now);
        if (ep->failed || !ep->connected || silence < first ||
            probe_age(ep, now, silence) < udp_probe_interval(silence))
            continue;
        ep_probe(ui, ep, now);
    }
    udp_live_progress(ui);
}
