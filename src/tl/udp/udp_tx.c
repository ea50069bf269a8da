/*
 * The udp transport's transmit path: packets cut into segments, each
 * segment's header and checksum, and datagrams handed to the kernel in
 * as few system calls as it takes (GSO, sendmmsg). Which segments are in
 * flight and when they go again is udp_rel.c's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tl/udp/udp.h"
#include "util/crc32c.h"
#include "util/log.h"

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
        seg->lane = 0;
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
static inline void hdr_fill(const udp_iface_t *ui, const udp_ep_t *ep, udp_seg_t *seg,
                            const udp_seg_desc_t *sd)
{
    udp_hdr_t *h = (udp_hdr_t *)seg->buf;

    seg->seq = ep->flow->tx[sd->ch].next_seq;
    seg->len = (uint32_t)(sizeof(*h) + sd->n);
    seg->sacked = 0;
    seg->resent = 0;
    seg->ext = NULL; /* the payload follows the header (seg_build may say otherwise) */
    seg->lane = 0;
    h->version = UDP_WIRE_VERSION;
    h->channel = (uint8_t)sd->ch;
    h->flags = htole16(sd->flags | (ui->super.rx_pressure ? UDP_FLAG_PRESSURE : 0));
    h->len = htole16((uint16_t)sd->n);
    h->port = ui->sock.self_sa.sin_port;
    h->job_key = htole64(ui->job_key);
    h->src_id = htole64(ui->uuid);
    h->dst_id = htole64(ep->super.uuid);
    h->seq = htole32(seg->seq);
    h->frag_id = htole32(sd->frag_id);
    h->offset = htole64(sd->offset);
    h->csum = 0;
    h->reserved = htole32(sd->aux);
    h->src_index = htons(ui->sock.index);
    h->dst_index = htons(ep->index);
    h->pad = 0;
}

/* Segment i of the nseg that carry d, per payload bytes each. Read data
 * in one piece is not copied (zcopy): the segment points at it, and it is
 * read from there whenever the segment is sent. */
static udp_seg_t *seg_build(udp_iface_t *ui, udp_ep_t *ep, const udp_send_desc_t *d, size_t i,
                            size_t nseg, size_t per)
{
    int whole = !(d->flags & (UDP_FLAG_GET_DATA | UDP_FLAG_PUT_DATA)), zcopy = !whole && d->iovcnt == 1;
    size_t off = i * per, n = d->len - off < per ? d->len - off : per;
    udp_seg_desc_t sd = {
        .ch = d->ch,
        .flags = (uint16_t)(d->flags | (whole && i == 0 ? UDP_FLAG_FIRST : 0) |
                            (whole && i == nseg - 1 ? UDP_FLAG_LAST : 0)),
        .frag_id = d->frag_id,
        .offset = whole ? (i == 0 ? d->len : off) : d->offset + off,
        .aux = d->aux,
        .n = n,
    };
    udp_seg_t *seg = udp_seg_alloc(ui, sizeof(udp_hdr_t) + (zcopy ? 0 : n));

    if (seg == NULL)
        return NULL;
    hdr_fill(ui, ep, seg, &sd);
    if (zcopy && n > 0) {
        seg->ext = (const unsigned char *)d->iov[0].iov_base + off;
        seg->ext_key = d->rkey;
    } else
        iov_gather(seg->buf + sizeof(udp_hdr_t), d->iov, d->iovcnt, off, n);
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
    const udp_tx_t *tx = &ep->flow->tx[UDP_CH_DATA];

    for (uint32_t s = tx->una; s != tx->next_seq; s++) {
        udp_seg_t *seg = tx->win[udp_tx_slot(tx, s)];
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
        ui->sock.gso = 0;
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

/* Sends stamped segments of one lane (or none): runs of equal size in
 * one GSO send each when the kernel takes them and no faults are
 * injected, the rest batched. */
static void lane_send(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t **segs, size_t n)
{
    int batch = ui->sock.gso && !udp_faults_active(&ui->faults);
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

/* Sends stamped segments, each on its lane (udp_node.c): a bulk packet's
 * segments on the lane it was given, and so are their retransmissions. */
static void segs_send(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t **segs, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && segs[j]->lane == segs[i]->lane)
            j++;
        if (segs[i]->lane != 0) {
            ui->sock.tx_lane = (int)segs[i]->lane - 1;
            ui->stats.lane_segs += j - i;
        }
        lane_send(ui, ep, segs + i, j - i);
        ui->sock.tx_lane = -1;
        i = j;
    }
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
    ui->stats.retransmits += n;
    segs_send(ui, ep, segs, n);
}

void udp_seg_retransmit(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t *seg)
{
    udp_segs_retransmit(ui, ep, &seg, 1);
}

/* Stamps and sends freshly built segments. */
static void segs_transmit(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t **segs, size_t n, uint64_t now)
{
    ui->stats.segs_sent += n;
    for (size_t k = 0; k < n; k++) {
        seg_stamp(ui, ep, segs[k]);
        segs[k]->sent_us = segs[k]->first_sent_us = now;
    }
    segs_send(ui, ep, segs, n);
}

/* A segment went out carrying our current ACKs: none is owed any more. */
static inline void acks_carried(udp_ep_t *ep)
{
    udp_flow_t *fl = udp_ep_flow(ep);

    if (fl->ack_queued) {
        util_dlist_unlink(&fl->ack_link);
        fl->ack_queued = 0;
        for (int c = 0; c < UDP_N_CH; c++)
            fl->rx[c].unacked = fl->rx[c].ack_now = 0;
    }
}

/* A flow this very send made, for a segment that did not go: freed again
 * if idle (nothing outside the call holds it: it did not exist before). */
static void flow_unmake(udp_iface_t *ui, udp_ep_t *ep, int made)
{
    if (made && ep->has_flow)
        udp_flow_settle(ui, ep);
}

/* A packet is sent whole or not at all: the segments it takes are in
 * their pool before the first goes (seg_build takes a full segment for a
 * payload it copies, a header only for data it points at, and for an
 * empty packet). */
static int segs_reserve(udp_iface_t *ui, const udp_send_desc_t *d, size_t nseg)
{
    int zcopy = (d->flags & (UDP_FLAG_GET_DATA | UDP_FLAG_PUT_DATA)) && d->iovcnt == 1;
    size_t full = zcopy || d->len == 0 ? 0 : nseg;

    if (util_pool_reserve(&ui->segs, full) == 0 && util_pool_reserve(&ui->hsegs, nseg - full) == 0)
        return 1;
    util_debug("udp: no memory for the %zu segments of a packet of %zu bytes: it waits", nseg, d->len);
    return 0;
}

/* Cuts a packet into segments of one channel, all or nothing: if the window
 * cannot take every segment, or their pools cannot (segs_reserve), nothing
 * is sent and the caller retries.
 * Read data (GET_DATA) is not copied: its segments point into the owner's
 * memory, which stays until the reader's FIN, and the FIN comes after the
 * reader has every byte, its header acknowledging them all; a reader that
 * fails takes the segments' resending with it. */
tmx_status_t udp_send_segs(udp_iface_t *ui, udp_ep_t *ep, const udp_send_desc_t *d)
{
    int ch = d->ch;
    size_t per = (ch == UDP_CH_PRIO ? UDP_PRIO_MTU : ui->cfg.mtu) - sizeof(udp_hdr_t);
    size_t nseg = d->len <= per ? 1 : (d->len + per - 1) / per;
    udp_seg_t *batch[UDP_GSO_MAX];
    uint32_t lane = 0;
    uint64_t now;
    int made = !ep->has_flow;

    if (ep->failed)
        return TMX_ERR_PEER_FAILED;
    ui->super.quiet = 0;
    if (nseg > UINT32_MAX || udp_flow(ui, ep) == NULL ||
        udp_tx_reserve(ui, &ep->flow->tx[ch], (uint32_t)nseg) != TMX_OK || !segs_reserve(ui, d, nseg)) {
        flow_unmake(ui, ep, made);
        return TMX_ERR_AGAIN;
    }
    /* bulk data, on the peer's lane: a packet of several datagrams, and
     * every piece of a read's or a write's data (the last may be short) */
    if (ch == UDP_CH_DATA && ui->sock.lanes > 0 && (nseg > 1 || (d->flags & (UDP_FLAG_GET_DATA | UDP_FLAG_PUT_DATA)))) {
        if (ep->lane == 0)
            ep->lane = (uint8_t)(1 + ui->sock.lane_next++ % ui->sock.lanes);
        lane = ep->lane;
    }
    now = udp_now_us(); /* one reading per send: in a VM it costs ~50 ns */
    for (size_t i = 0, nb = 0; i < nseg; i++) {
        udp_seg_t *seg = seg_build(ui, ep, d, i, nseg, per); /* never NULL: reserved */
        seg->lane = lane;
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
    udp_seg_desc_t sd = {.ch = UDP_CH_DATA, .flags = UDP_FLAG_FIRST | UDP_FLAG_LAST, .offset = len, .n = len};
    udp_hdr_t *h;
    uint64_t now;

    if (seg == NULL)
        return TMX_ERR_AGAIN;
    ui->super.quiet = 0;
    seg->pooled = UDP_SEG_POOL;
    hdr_fill(ui, ep, seg, &sd);
    h = (udp_hdr_t *)seg->buf;
    udp_hdr_fill_acks(ep, h);
    iov_gather(seg->buf + sizeof(*h), iov, iovcnt, 0, len); /* skips empty pieces, which may have no buffer */
    h->csum = htole32(util_crc32c(0, seg->buf, seg->len));
    udp_datagram_send(ui, ep, seg->buf, seg->len);
    now = udp_now_us();
    seg->sent_us = seg->first_sent_us = now;
    ui->stats.segs_sent++;
    udp_tx_track(ui, ep, UDP_CH_DATA, seg, now);
    acks_carried(ep);
    return TMX_OK;
}

tmx_status_t udp_send(tl_ep_t *tep, const struct iovec *iov, int iovcnt)
{
    udp_ep_t *ep = (udp_ep_t *)tep;
    udp_iface_t *ui = (udp_iface_t *)tl_ep_iface(tep);
    udp_flow_t *fl = udp_ep_flow(ep);
    size_t len = 0;
    int made = 0;
    tmx_status_t st;

    for (int i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    if (len == 0) {
        util_error("udp: empty packet refused (1 to %d bytes)", UDP_MAX_PACKET);
        return TMX_ERR_INVALID;
    }
    if (fl == NULL && !ep->failed) {
        if ((fl = udp_flow_make(ui, ep)) == NULL)
            return TMX_ERR_AGAIN;
        made = 1;
    }
    if (len <= ui->cfg.mtu - sizeof(udp_hdr_t) && !ep->failed &&
        fl->tx[UDP_CH_DATA].next_seq - fl->tx[UDP_CH_DATA].una <= fl->tx[UDP_CH_DATA].win_mask) {
        if ((st = send_one(ui, ep, iov, iovcnt, len)) != TMX_OK)
            flow_unmake(ui, ep, made);
        return st;
    }
    if (len > UDP_MAX_PACKET) {
        util_error("udp: packet of %zu bytes exceeds %d", len, UDP_MAX_PACKET);
        flow_unmake(ui, ep, made);
        return TMX_ERR_INVALID;
    }
    udp_send_desc_t d = {.ch = UDP_CH_DATA, .iov = iov, .iovcnt = iovcnt, .len = len};
    if ((st = udp_send_segs(ui, ep, &d)) != TMX_OK)
        flow_unmake(ui, ep, made);
    return st;
}
