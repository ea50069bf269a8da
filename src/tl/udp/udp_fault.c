/*
 * Fault injection inside the transport, independent of the kernel: the
 * TMX_UDP_FAULTS setting (e.g. "drop=0.05,dup=0.01,reorder=0.05,
 * corrupt=0.001") drops, duplicates, reorders (holds a datagram back until
 * the next one has gone) and corrupts (flips a byte after the checksum) the
 * given fraction of outgoing datagrams. Also the one place datagrams leave.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tl/udp/udp.h"
#include "util/hash.h"
#include "util/log.h"

void udp_faults_init(udp_faults_t *f, const tl_udp_faults_t *rates, uint64_t seed)
{
    memset(f, 0, sizeof(*f));
    f->rng = seed | 1;
    f->drop = rates->drop;
    f->dup = rates->dup;
    f->reorder = rates->reorder;
    f->corrupt = rates->corrupt;
    if (f->drop == 0 && f->dup == 0 && f->reorder == 0 && f->corrupt == 0)
        return;
    util_info("udp: injecting faults drop=%g dup=%g reorder=%g corrupt=%g", f->drop, f->dup,
              f->reorder, f->corrupt);
}

void udp_faults_fini(udp_faults_t *f)
{
    free(f->held);
    f->held = NULL;
}

void udp_faults_forget(udp_faults_t *f, const struct udp_ep *ep)
{
    if (f->held != NULL && f->held_ep == ep) {
        free(f->held);
        f->held = NULL;
        f->held_ep = NULL;
    }
}

static double roll(udp_faults_t *f)
{
    f->rng = util_hash64(f->rng + 0x9e3779b97f4a7c15ULL);
    return (double)(f->rng >> 11) * (1.0 / 9007199254740992.0);
}

/* A full socket buffer is a loss like any other: retransmission covers
 * it. A refusal that a socket reports for an earlier datagram (ICMP port
 * unreachable) is evidence that the peer is gone (udp_live.c). */
static void sent(udp_iface_t *ui, udp_ep_t *ep, int fd, ssize_t n, const char *call)
{
    if (n >= 0 || errno == EAGAIN || errno == ENOBUFS)
        return;
    util_debug("udp: %s: %s", call, strerror(errno));
    udp_live_send_error(ui, ep, fd, errno);
}

static void raw_send(udp_iface_t *ui, udp_ep_t *ep, const void *buf, size_t len)
{
    const struct sockaddr_in *sa;
    int fd = udp_ep_dest(ui, ep, &sa);
    ssize_t n;

    do {
        n = sendto(fd, buf, len, 0, (const struct sockaddr *)sa, sa != NULL ? sizeof(*sa) : 0);
    } while (n < 0 && errno == EINTR);
    sent(ui, ep, fd, n, "sendto");
}

static void release_held(udp_iface_t *ui)
{
    udp_faults_t *f = &ui->faults;
    int lane = ui->sock.tx_lane;

    ui->sock.tx_lane = -1; /* not the lane of what is being sent now: the endpoint's own socket */
    raw_send(ui, f->held_ep, f->held, f->held_len);
    ui->sock.tx_lane = lane;
    free(f->held);
    f->held = NULL;
}

static void faulty_send(udp_iface_t *ui, udp_ep_t *ep, unsigned char *buf, size_t len);

/* buf == NULL: only release a held datagram (called from progress). */
void udp_datagram_send(udp_iface_t *ui, udp_ep_t *ep, unsigned char *buf, size_t len)
{
    if (buf == NULL) {
        if (ui->faults.held != NULL)
            release_held(ui);
        return;
    }
    if (!udp_faults_active(&ui->faults)) {
        raw_send(ui, ep, buf, len);
        return;
    }
    faulty_send(ui, ep, buf, len);
}

void udp_datagram_sendv(udp_iface_t *ui, udp_ep_t *ep, const struct iovec *iov, int n, size_t len)
{
    struct msghdr mh = {NULL, 0, (struct iovec *)iov, (size_t)n, NULL, 0, 0};
    const struct sockaddr_in *sa;
    ssize_t r;
    int fd;

    if (udp_faults_active(&ui->faults)) {
        size_t off = 0;
        if (ui->gather == NULL && (ui->gather = malloc(UDP_MAX_DGRAM)) == NULL)
            return; /* like a loss */
        for (int i = 0; i < n; off += iov[i++].iov_len)
            memcpy(ui->gather + off, iov[i].iov_base, iov[i].iov_len);
        faulty_send(ui, ep, ui->gather, len);
        return;
    }
    fd = udp_ep_dest(ui, ep, &sa);
    mh.msg_name = (void *)sa;
    mh.msg_namelen = sa != NULL ? sizeof(*sa) : 0;
    do {
        r = sendmsg(fd, &mh, 0);
    } while (r < 0 && errno == EINTR);
    sent(ui, ep, fd, r, "sendmsg");
}

/* Apart from the fast path: its datagram-sized buffer would move every
 * send's stack by 64 KiB. */
static __attribute__((noinline)) void faulty_send(udp_iface_t *ui, udp_ep_t *ep, unsigned char *buf,
                                                  size_t len)
{
    udp_faults_t *f = &ui->faults;
    unsigned char tmp[UDP_MAX_DGRAM];

    if (f->drop > 0 && roll(f) < f->drop) {
        f->dropped++;
        return;
    }
    if (f->corrupt > 0 && roll(f) < f->corrupt) {
        memcpy(tmp, buf, len);
        tmp[(size_t)(roll(f) * (double)len)] ^= (unsigned char)(1u << (f->rng & 7));
        f->corrupted++;
        buf = tmp;
    }
    if (f->reorder > 0 && f->held == NULL && roll(f) < f->reorder && (f->held = malloc(len)) != NULL) {
        memcpy(f->held, buf, len);
        f->held_len = len;
        f->held_ep = ep;
        f->reordered++;
        return;
    }
    raw_send(ui, ep, buf, len);
    if (f->dup > 0 && roll(f) < f->dup) {
        raw_send(ui, ep, buf, len);
        f->duplicated++;
    }
    if (f->held != NULL)
        release_held(ui);
}
