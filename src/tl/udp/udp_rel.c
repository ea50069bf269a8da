/*
 * Reliability for the udp transport (seed 001): per peer and channel,
 * sequence numbers, a send window, cumulative ACKs piggy-backed on every
 * datagram, delayed ACKs, retransmission timers in a timer wheel with
 * backoff, fast retransmit on duplicate ACKs, and in-order delivery with
 * early segments kept until the gap fills. A peer that stays silent past
 * the timeout is declared failed.
 */
#include <stdlib.h>
#include <string.h>

#include "tl/udp/udp.h"
#include "util/crc32c.h"
#include "util/log.h"

#define UDP_ACK_EVERY 32        /* segments delivered before an ACK is forced */
#define UDP_DUP_ACKS 3          /* duplicate ACKs that trigger a retransmit */
#define UDP_RTO_MAX_US 1000000
#define UDP_RTO_MIN_US 200       /* a timeout never comes sooner */
#define UDP_SACK_RETX_US 500     /* before an RTT sample: a hole older than
                                    this is resent on SACK */
#define UDP_SACK_BURST 256       /* segments resent per SACK, at most */
#define UDP_OOO_MAX_BYTES (256u << 20) /* early segments held, all peers */

void udp_seg_retransmit(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t *seg);

static inline int seq_before(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) < 0;
}

/* ------------------------------------------------------------------ send */

static void tx_timer_fire(util_timer_t *t);

void udp_tx_init(udp_iface_t *ui, udp_ep_t *ep, int ch)
{
    udp_tx_t *tx = &ep->tx[ch];

    tx->win = NULL; /* allocated by the first send */
    tx->rto_us = ui->rto_us;
    tx->ui = ui;
    tx->ep = ep;
    tx->ch = ch;
    tx->timer.fire = tx_timer_fire;
    util_dlist_init(&tx->timer.link);
}

void udp_tx_fini(udp_tx_t *tx)
{
    if (tx->win == NULL)
        return;
    for (uint32_t s = tx->una; s != tx->next_seq; s++)
        udp_seg_free(tx->ui, tx->win[s % tx->ui->window]);
    free(tx->win);
    tx->win = NULL;
}

uint32_t udp_tx_room(const udp_iface_t *ui, const udp_tx_t *tx)
{
    return ui->window - (tx->next_seq - tx->una);
}

/* Jacobson/Karels: srtt += (m - srtt) / 8, rttvar += (|m - srtt| - rttvar) / 4. */
static void rtt_sample(udp_tx_t *tx, uint64_t m)
{
    if (tx->srtt_us == 0) {
        tx->srtt_us = m > 0 ? m : 1;
        tx->rttvar_us = m / 2;
        return;
    }
    uint64_t err = m > tx->srtt_us ? m - tx->srtt_us : tx->srtt_us - m;
    tx->rttvar_us = (3 * tx->rttvar_us + err) / 4;
    tx->srtt_us = (7 * tx->srtt_us + m) / 8;
    if (tx->srtt_us == 0)
        tx->srtt_us = 1;
}

/* The timeout before backoff: the setting until the first RTT sample;
 * then a round trip plus four deviations plus the peer's ACK delay, which
 * the sample may or may not have included. Losses at the tail of a burst,
 * which no later ACK reports, are repaired within about this. */
static uint64_t rto_base(const udp_iface_t *ui, const udp_tx_t *tx)
{
    uint64_t rto;

    if (tx->srtt_us == 0)
        return ui->rto_us;
    rto = tx->srtt_us + 4 * tx->rttvar_us + ui->ack_delay_us;
    if (rto < UDP_RTO_MIN_US)
        rto = UDP_RTO_MIN_US;
    return rto > ui->rto_us ? ui->rto_us : rto;
}

/* How long a hole below a selectively acknowledged segment may be in
 * flight before it counts as lost: a round trip and some. */
static uint64_t hole_age(const udp_tx_t *tx)
{
    if (tx->srtt_us == 0)
        return UDP_SACK_RETX_US;
    return tx->srtt_us + 2 * tx->rttvar_us;
}

void udp_tx_track(udp_iface_t *ui, udp_ep_t *ep, int ch, udp_seg_t *seg)
{
    udp_tx_t *tx = &ep->tx[ch];

    if (tx->una == tx->next_seq)
        tx->last_progress_us = udp_now_us();
    tx->win[seg->seq % ui->window] = seg;
    tx->next_seq++;
    if (!tx->timer.armed)
        util_timer_arm(&ui->wheel, &tx->timer, udp_now_us() + tx->rto_us);
}

/* After a timeout every segment the receiver has not reported holding and
 * that has waited as long is presumed lost, not only the oldest: one
 * timeout then repairs a whole tail of losses. */
static void rto_resend(udp_iface_t *ui, udp_tx_t *tx, uint64_t now)
{
    uint32_t sent = 0;

    for (uint32_t seq = tx->una; seq != tx->next_seq && sent < UDP_SACK_BURST; seq++) {
        udp_seg_t *seg = tx->win[seq % ui->window];
        if (seq != tx->una && (seg->sacked || now - seg->sent_us < tx->rto_us))
            continue;
        udp_seg_retransmit(ui, tx->ep, seg);
        sent++;
    }
}

/* The oldest segment went unanswered for a timeout: send again with a
 * longer timeout, or give the peer up. */
static void tx_timer_fire(util_timer_t *t)
{
    udp_tx_t *tx = util_container_of(t, udp_tx_t, timer);
    udp_iface_t *ui = tx->ui;
    uint64_t now = udp_now_us();

    if (tx->una == tx->next_seq || tx->ep->failed)
        return;
    /* Silence is what counts: a peer that still answers, even only with
     * ACKs of duplicates, is alive however lossy the path. */
    if (now - tx->ep->last_rx_us > ui->peer_timeout_us && now - tx->last_progress_us > ui->peer_timeout_us) {
        udp_ep_fail(ui, tx->ep);
        return;
    }
    ui->timeouts++;
    util_debug("udp: timeout on channel %d to peer %u after %llu us (timeout %llu us)", tx->ch,
               tx->ep->super.peer, (unsigned long long)(now - tx->last_progress_us),
               (unsigned long long)tx->rto_us);
    rto_resend(ui, tx, now);
    tx->rto_us = tx->rto_us * 2 > UDP_RTO_MAX_US ? UDP_RTO_MAX_US : tx->rto_us * 2;
    util_timer_arm(&ui->wheel, &tx->timer, now + tx->rto_us);
}

void udp_tx_acked(udp_iface_t *ui, udp_ep_t *ep, int ch, uint32_t ack)
{
    udp_tx_t *tx = &ep->tx[ch];

    if (seq_before(tx->una, ack) && !seq_before(tx->next_seq, ack)) {
        udp_seg_t *newest = tx->win[(ack - 1) % ui->window];
        if (!newest->resent && ui->rx_now_us > newest->sent_us)
            rtt_sample(tx, ui->rx_now_us - newest->sent_us);
        for (; tx->una != ack; tx->una++) {
            udp_seg_free(ui, tx->win[tx->una % ui->window]);
            tx->win[tx->una % ui->window] = NULL;
        }
        tx->dup_acks = 0;
        tx->rto_us = rto_base(ui, tx);
        tx->last_progress_us = udp_now_us();
        if (tx->una == tx->next_seq)
            util_timer_cancel(&tx->timer);
        else
            util_timer_arm(&ui->wheel, &tx->timer, tx->last_progress_us + tx->rto_us);
        return;
    }
    if (ack == tx->una && tx->una != tx->next_seq && ++tx->dup_acks == UDP_DUP_ACKS)
        udp_seg_retransmit(ui, ep, tx->win[tx->una % ui->window]);
}

/* ------------------------------------------------------------------ ACKs */

void udp_hdr_fill_acks(const udp_ep_t *ep, udp_hdr_t *h)
{
    for (int ch = 0; ch < UDP_N_CH; ch++)
        h->ack[ch] = htole32(ep->rx[ch].expected);
}

void udp_ack_schedule(udp_iface_t *ui, udp_ep_t *ep)
{
    if (ep->ack_queued)
        return;
    ep->ack_queued = 1;
    ep->ack_due_us = udp_now_us() + ui->ack_delay_us;
    util_dlist_push_tail(&ui->acks, &ep->ack_link);
}

/* The data channel's early segments as a bitmap; 0 when there are none. */
static size_t sack_fill(const udp_iface_t *ui, const udp_rx_t *rx, udp_sack_t *s)
{
    uint32_t span = rx->highest - rx->expected;

    if (rx->n_ooo == 0 || (int32_t)span <= 0)
        return 0;
    if (span > UDP_SACK_BITS)
        span = UDP_SACK_BITS;
    memset(s->bits, 0, (span + 7) / 8);
    for (uint32_t i = 0; i < span; i++) {
        const udp_seg_t *seg = rx->ooo[(rx->expected + 1 + i) % ui->window];
        if (seg != NULL && seg->seq == rx->expected + 1 + i)
            s->bits[i / 8] |= (uint8_t)(1u << (i % 8));
    }
    s->base = htole32(rx->expected);
    s->nbits = htole32(span);
    return offsetof(udp_sack_t, bits) + (span + 7) / 8;
}

static void ack_send(udp_iface_t *ui, udp_ep_t *ep)
{
    udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_PRIO, htole16(UDP_FLAG_ACK_ONLY), 0,
                   htole64(ui->job_key), htole64(ui->uuid), htole64(ep->uuid), 0, {0, 0}, 0, 0, 0, 0};
    unsigned char buf[sizeof(h) + sizeof(udp_sack_t)];
    size_t n = sack_fill(ui, &ep->rx[UDP_CH_DATA], (udp_sack_t *)(buf + sizeof(h)));

    udp_hdr_fill_acks(ep, &h);
    if (n != 0)
        h.flags = htole16(UDP_FLAG_ACK_ONLY | UDP_FLAG_SACK);
    h.len = htole32((uint32_t)n);
    memcpy(buf, &h, sizeof(h));
    h.csum = htole32(util_crc32c(0, buf, sizeof(h) + n));
    memcpy(buf, &h, sizeof(h));
    udp_datagram_send(ui, &ep->sa, buf, sizeof(h) + n);
}

/* Marks what the receiver holds, then resends the holes below the highest
 * segment it holds that have not been sent for a while. */
void udp_tx_sacked(udp_iface_t *ui, udp_ep_t *ep, const unsigned char *p, size_t len)
{
    udp_tx_t *tx = &ep->tx[UDP_CH_DATA];
    uint64_t now = udp_now_us();
    udp_sack_t s;
    uint32_t top = tx->una, sent = 0;

    if (len < offsetof(udp_sack_t, bits) || len > sizeof(s))
        return;
    memcpy(&s, p, len);
    s.base = le32toh(s.base);
    s.nbits = le32toh(s.nbits);
    if (s.nbits > UDP_SACK_BITS || len < offsetof(udp_sack_t, bits) + (s.nbits + 7) / 8)
        return;
    for (uint32_t i = 0; i < s.nbits; i++) {
        uint32_t seq = s.base + 1 + i;
        if (!(s.bits[i / 8] & (1u << (i % 8))) || seq_before(seq, tx->una) || !seq_before(seq, tx->next_seq))
            continue;
        tx->win[seq % ui->window]->sacked = 1;
        top = seq;
    }
    for (uint32_t seq = tx->una; seq_before(seq, top) && sent < UDP_SACK_BURST; seq++) {
        udp_seg_t *seg = tx->win[seq % ui->window];
        if (seg->sacked || now - seg->sent_us < hole_age(tx))
            continue;
        udp_seg_retransmit(ui, ep, seg);
        sent++;
    }
}

/* Sends the ACKs that fell due (delayed ACK) or must go now. */
int udp_ack_flush(udp_iface_t *ui, uint64_t now)
{
    util_dlist_t *pos, *tmp;
    int n = 0;

    util_dlist_foreach_safe(pos, tmp, &ui->acks) {
        udp_ep_t *ep = util_container_of(pos, udp_ep_t, ack_link);
        if (!ep->rx[0].ack_now && !ep->rx[1].ack_now && ep->ack_due_us > now)
            continue;
        util_dlist_unlink(&ep->ack_link);
        ep->ack_queued = 0;
        for (int ch = 0; ch < UDP_N_CH; ch++) {
            ep->rx[ch].ack_now = 0;
            ep->rx[ch].unacked = 0;
        }
        ack_send(ui, ep);
        n++;
    }
    return n;
}

/* --------------------------------------------------------------- receive */

void udp_rx_fini(udp_iface_t *ui, udp_rx_t *rx)
{
    if (rx->ooo != NULL) {
        for (uint32_t i = 0; i < ui->window; i++)
            if (rx->ooo[i] != NULL)
                udp_seg_free(ui, rx->ooo[i]);
        free(rx->ooo);
        rx->ooo = NULL;
    }
    free(rx->reasm);
    rx->reasm = NULL;
}

static void reasm_reset(udp_rx_t *rx)
{
    free(rx->reasm);
    rx->reasm = NULL;
    rx->reasm_len = 0;
    rx->reasm_total = 0;
}

static void reasm_fail(udp_iface_t *ui, udp_rx_t *rx, const char *why)
{
    ui->dropped++;
    util_error("udp: reassembly failed (%s); packet lost", why);
    reasm_reset(rx);
}

/* Segments of one packet arrive in sequence order, so reassembly appends. */
static void deliver_packet_seg(udp_iface_t *ui, udp_ep_t *ep, udp_rx_t *rx, const udp_hdr_t *h,
                               const unsigned char *p)
{
    if (h->flags & UDP_FLAG_FIRST) {
        if (rx->reasm != NULL)
            reasm_fail(ui, rx, "new packet before the last one ended");
        if (h->flags & UDP_FLAG_LAST) {
            if (h->offset != h->len)
                ui->dropped++;
            else if (h->len != 0) /* empty: a keepalive */
                ui->super.recv_cb(ui->super.recv_arg, ep->uuid, p, h->len);
            return;
        }
        if (h->offset > UDP_MAX_PACKET || h->len > h->offset || (rx->reasm = malloc(h->offset)) == NULL) {
            reasm_fail(ui, rx, "bad packet length");
            return;
        }
        rx->reasm_total = h->offset;
    } else if (rx->reasm == NULL || h->offset != rx->reasm_len || h->len > rx->reasm_total - rx->reasm_len) {
        reasm_fail(ui, rx, "segment out of place");
        return;
    }
    memcpy(rx->reasm + rx->reasm_len, p, h->len);
    rx->reasm_len += h->len;
    if (!(h->flags & UDP_FLAG_LAST))
        return;
    if (rx->reasm_len == rx->reasm_total)
        ui->super.recv_cb(ui->super.recv_arg, ep->uuid, rx->reasm, rx->reasm_len);
    else
        reasm_fail(ui, rx, "short packet");
    reasm_reset(rx);
}

static void deliver(udp_iface_t *ui, udp_ep_t *ep, const udp_hdr_t *h, const unsigned char *p)
{
    udp_rx_t *rx = &ep->rx[h->channel];

    if (h->flags & UDP_FLAG_GET_REQ)
        udp_get_req_arrive(ui, ep, p, h->len);
    else if (h->flags & UDP_FLAG_GET_DATA)
        udp_get_data_arrive(ui, ep, h, p);
    else
        deliver_packet_seg(ui, ep, rx, h, p);
}

/* A segment kept for later is the whole datagram: header, then payload. */
static void ooo_store(udp_iface_t *ui, udp_rx_t *rx, const udp_hdr_t *h, const unsigned char *p)
{
    udp_seg_t **slot;
    udp_seg_t *seg;

    if (seq_before(rx->highest, h->seq))
        rx->highest = h->seq;
    if (ui->ooo_bytes + h->len > UDP_OOO_MAX_BYTES)
        return; /* dropped: the sender will retransmit */
    if (rx->ooo == NULL && (rx->ooo = calloc(ui->window, sizeof(*rx->ooo))) == NULL)
        return;
    slot = &rx->ooo[h->seq % ui->window];
    if (*slot != NULL)
        return; /* a duplicate of one already kept */
    seg = udp_seg_alloc(ui, sizeof(*h) + h->len);
    if (seg == NULL)
        return; /* dropped: the sender will retransmit */
    seg->seq = h->seq;
    seg->len = (uint32_t)(sizeof(*h) + h->len);
    memcpy(seg->buf, h, sizeof(*h));
    memcpy(seg->buf + sizeof(*h), p, h->len);
    *slot = seg;
    rx->n_ooo++;
    ui->ooo_bytes += h->len;
}

static void drain_ooo(udp_iface_t *ui, udp_ep_t *ep, udp_rx_t *rx)
{
    udp_seg_t **slot;

    if (rx->n_ooo == 0)
        return;
    while (*(slot = &rx->ooo[rx->expected % ui->window]) != NULL && (*slot)->seq == rx->expected) {
        udp_seg_t *seg = *slot;
        *slot = NULL;
        rx->n_ooo--;
        ui->ooo_bytes -= seg->len - sizeof(udp_hdr_t);
        rx->expected++;
        deliver(ui, ep, (const udp_hdr_t *)seg->buf, seg->buf + sizeof(udp_hdr_t));
        udp_seg_free(ui, seg);
        rx->unacked++;
    }
}

void udp_rx_segment(udp_iface_t *ui, udp_ep_t *ep, const udp_hdr_t *h, const unsigned char *p)
{
    udp_rx_t *rx = &ep->rx[h->channel];
    int32_t ahead = (int32_t)(h->seq - rx->expected);

    if (ahead == 0) {
        rx->expected++;
        deliver(ui, ep, h, p);
        drain_ooo(ui, ep, rx);
        if (++rx->unacked >= UDP_ACK_EVERY)
            rx->ack_now = 1;
    } else if (ahead > 0 && (uint32_t)ahead < ui->window) {
        ooo_store(ui, rx, h, p);
        rx->ack_now = 1; /* a duplicate ACK tells the sender of the gap */
    } else {
        rx->ack_now = 1; /* an old duplicate: our ACK was lost */
    }
    udp_ack_schedule(ui, ep);
}
