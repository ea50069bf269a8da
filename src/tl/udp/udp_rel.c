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
#define UDP_PTO_MIN_US 100       /* a tail probe never comes sooner */
#define UDP_SACK_BURST 256       /* segments resent per SACK, at most */
#define UDP_STALL_MAX_US 1000000 /* the longest between two stall reports */
#define UDP_REFILL_EVERY 64     /* segments taken between requests for more of what was left */
#define UDP_REASM_MAX_BYTES (64u << 20) /* packets being put together, all strangers */

/* Segments found lost by one loop, sent together when it ends. */
typedef struct resend_batch {
    udp_seg_t *segs[UDP_GSO_MAX];
    size_t n;
} resend_batch_t;

static void resend_flush(udp_iface_t *ui, udp_ep_t *ep, resend_batch_t *b)
{
    if (b->n > 0)
        udp_segs_retransmit(ui, ep, b->segs, b->n);
    b->n = 0;
}

static void resend_add(udp_iface_t *ui, udp_ep_t *ep, resend_batch_t *b, udp_seg_t *seg)
{
    b->segs[b->n++] = seg;
    if (b->n == UDP_GSO_MAX)
        resend_flush(ui, ep, b);
}

static inline int seq_before(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) < 0;
}

/* ------------------------------------------------------------------ send */

static void tx_timer_fire(util_timer_t *t);

/* The first window's slots: UDP_WIN_FIRST, or the whole window if less. */
static uint32_t win_first(const udp_iface_t *ui)
{
    return UDP_WIN_FIRST < ui->cfg.window ? UDP_WIN_FIRST : ui->cfg.window;
}

static void tx_init(udp_iface_t *ui, udp_flow_t *fl, int ch)
{
    udp_tx_t *tx = &fl->tx[ch];

    tx->next_seq = tx->una = tx->rack_seq = fl->ep->idle.next_seq[ch];
    tx->win = tx->win0;
    tx->win_mask = win_first(ui) - 1;
    tx->rto_us = udp_rto_base(ui, fl->ep);
    tx->ui = ui;
    tx->ep = fl->ep;
    tx->ch = ch;
    tx->timer.fire = tx_timer_fire;
    util_dlist_init(&tx->timer.link);
}

void udp_tx_fini(udp_tx_t *tx)
{
    if (tx->win == NULL)
        return;
    for (uint32_t s = tx->una; s != tx->next_seq; s++)
        udp_seg_free(tx->ui, tx->win[udp_tx_slot(tx, s)]);
    if (tx->win != tx->win0)
        free(tx->win);
    tx->win = NULL;
}

/* An array of slots slots for the segments in flight: the flow's own
 * first window when they fit in it, else one of its own. */
static tmx_status_t tx_win_resize(udp_tx_t *tx, uint32_t slots)
{
    udp_seg_t *old[UDP_WIN_FIRST];
    udp_seg_t **from = tx->win, **win;

    if (slots <= UDP_WIN_FIRST) {
        if (from == tx->win0)
            return TMX_OK;
        memset(old, 0, sizeof(old));
        win = old; /* gathered aside, then into win0 */
    } else if ((win = calloc(slots, sizeof(*win))) == NULL) {
        return TMX_ERR_AGAIN;
    }
    for (uint32_t s = tx->una; s != tx->next_seq; s++)
        win[s & (slots - 1)] = from[udp_tx_slot(tx, s)];
    if (win == old) {
        memcpy(tx->win0, old, sizeof(old));
        win = tx->win0;
    }
    if (from != tx->win0)
        free(from);
    tx->win = win;
    tx->win_mask = slots - 1;
    return TMX_OK;
}

tmx_status_t udp_tx_reserve(udp_iface_t *ui, udp_tx_t *tx, uint32_t n)
{
    uint32_t need = tx->next_seq - tx->una + n, slots = tx->win_mask + 1;

    if (need > ui->cfg.window)
        return TMX_ERR_AGAIN;
    if (need <= slots)
        return TMX_OK;
    while (slots < need)
        slots *= 2;
    return tx_win_resize(tx, slots);
}

/* Jacobson/Karels: srtt += (m - srtt) / 8, rttvar += (|m - srtt| - rttvar) / 4.
 * Samples come only from segments sent once and acknowledged without a
 * hole before them (Karn, extended): an ACK held back by a loss measures
 * the repair, not the path. */
static void rtt_sample(udp_conn_t *c, uint64_t m)
{
    uint64_t err;

    if (m > UINT32_MAX / 8)
        m = UINT32_MAX / 8; /* the sums below stay in 32 bits */
    if (c->srtt_us == 0) {
        c->srtt_us = m > 0 ? (uint32_t)m : 1;
        c->rttvar_us = (uint32_t)(m / 2);
        return;
    }
    err = m > c->srtt_us ? m - c->srtt_us : c->srtt_us - m;
    c->rttvar_us = (uint32_t)((3 * (uint64_t)c->rttvar_us + err) / 4);
    c->srtt_us = (uint32_t)((7 * (uint64_t)c->srtt_us + m) / 8);
    if (c->srtt_us == 0)
        c->srtt_us = 1;
}

/* The timeout before backoff: the setting until the first RTT sample;
 * then a round trip plus four deviations plus the peer's ACK delay, which
 * the sample may or may not have included. Losses at the tail of a burst,
 * which no later ACK reports, are repaired within about this. */
uint64_t udp_rto_base(const udp_iface_t *ui, const udp_ep_t *ep)
{
    const udp_conn_t *c = udp_ep_conn(ui, ep);
    uint64_t rto;

    if (c->srtt_us == 0)
        return ui->cfg.rto_us;
    rto = c->srtt_us + 4 * (uint64_t)c->rttvar_us + ui->cfg.ack_delay_us;
    if (rto < UDP_RTO_MIN_US)
        rto = UDP_RTO_MIN_US;
    return rto > ui->cfg.rto_us ? ui->cfg.rto_us : rto;
}

/* The tail loss probe's timeout (TLP): a flight whose last segments are
 * lost draws no ACK that would reveal it, so after about a round trip
 * without one the newest segment goes again, and its ACK (with SACK)
 * shows what is missing. */
static uint64_t pto(const udp_iface_t *ui, const udp_ep_t *ep)
{
    uint64_t t;

    if (udp_ep_conn(ui, ep)->srtt_us == 0)
        return ui->cfg.rto_us;
    t = (uint64_t)udp_ep_conn(ui, ep)->srtt_us + udp_ep_conn(ui, ep)->srtt_us / 2 + ui->cfg.ack_delay_us;
    return t < UDP_PTO_MIN_US ? UDP_PTO_MIN_US : t;
}

/* How long the flight may go without progress: the tail probe first,
 * then the timeout. */
static uint64_t tx_timer_span(const udp_iface_t *ui, const udp_tx_t *tx)
{
    uint64_t t = tx->probed ? tx->rto_us : pto(ui, tx->ep);

    return t < tx->rto_us ? t : tx->rto_us;
}

static void tx_timer_rearm(udp_iface_t *ui, udp_tx_t *tx, uint64_t now)
{
    util_timer_arm(&ui->wheel, &tx->timer, now + tx_timer_span(ui, tx));
}

void udp_tx_track(udp_iface_t *ui, udp_ep_t *ep, int ch, udp_seg_t *seg, uint64_t now)
{
    udp_tx_t *tx = &ep->flow->tx[ch];

    if (tx->una == tx->next_seq) {
        tx->last_progress_us = now;
        /* a timer left armed by an earlier flight may be due later than
         * this one's (a backed-off timeout, the first probe before any
         * RTT sample): never let it delay this flight's */
        if (tx->timer.armed && tx->timer.due_us > now + tx_timer_span(ui, tx))
            tx_timer_rearm(ui, tx, now);
    }
    tx->win[udp_tx_slot(tx, seg->seq)] = seg;
    tx->next_seq++;
    if (!tx->timer.armed)
        tx_timer_rearm(ui, tx, now);
}

/* Loss detection after RACK, for a path that keeps order: once a segment
 * is known delivered, a segment below it that was sent only once went
 * before it and is lost; one that was resent is lost if that resend went
 * before the delivered segment's first sending (which copy arrived is not
 * known, so the earliest is assumed: a needless resend can then never
 * make segments still on their way look lost). A resend refreshes the
 * send time, so each loss is resent once per proof. */
static int rack_lost(const udp_tx_t *tx, const udp_seg_t *seg)
{
    if (seg->sacked)
        return 0;
    return seg->resent ? seg->sent_us < tx->rack_us : seq_before(seg->seq, tx->rack_seq);
}

static void rack_resend(udp_iface_t *ui, udp_ep_t *ep, udp_tx_t *tx)
{
    resend_batch_t b = {.n = 0};
    uint32_t sent = 0;

    for (uint32_t seq = tx->una; seq_before(seq, tx->rack_seq) && sent < UDP_SACK_BURST; seq++) {
        udp_seg_t *seg = tx->win[udp_tx_slot(tx, seq)];
        if (!rack_lost(tx, seg))
            continue;
        resend_add(ui, ep, &b, seg);
        sent++;
    }
    resend_flush(ui, ep, &b);
}

static void rack_update(udp_tx_t *tx, const udp_seg_t *seg)
{
    if (seq_before(tx->rack_seq, seg->seq))
        tx->rack_seq = seg->seq;
    if (seg->first_sent_us > tx->rack_us)
        tx->rack_us = seg->first_sent_us;
}

/* Sends seg again from the endpoint's own socket even if it goes on a
 * lane: a lane's socket is the node's, unconnected, and hears no refusal,
 * so what a timer sends (the probe, a timeout's first segment) also asks
 * whether the peer's port is still there (udp_live.c). */
static void seg_resend_direct(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t *seg)
{
    uint32_t lane = seg->lane;

    seg->lane = 0;
    udp_seg_retransmit(ui, ep, seg);
    seg->lane = lane;
}

/* The probe: the newest segment the receiver has not reported. */
static void tail_probe(udp_iface_t *ui, udp_tx_t *tx)
{
    for (uint32_t seq = tx->next_seq - 1; seq_before(seq, tx->next_seq) && !seq_before(seq, tx->una); seq--) {
        udp_seg_t *seg = tx->win[udp_tx_slot(tx, seq)];
        if (!seg->sacked) {
            seg_resend_direct(ui, tx->ep, seg);
            return;
        }
    }
}

/* After a timeout every segment the receiver has not reported holding and
 * that has waited as long is presumed lost, not only the oldest: one
 * timeout then repairs a whole tail of losses. */
static void rto_resend(udp_iface_t *ui, udp_tx_t *tx, uint64_t now)
{
    resend_batch_t b = {.n = 0};
    uint32_t sent = 0;

    for (uint32_t seq = tx->una; seq != tx->next_seq && sent < UDP_SACK_BURST; seq++) {
        udp_seg_t *seg = tx->win[udp_tx_slot(tx, seq)];
        if (seq != tx->una && (seg->sacked || now - seg->sent_us < tx->rto_us))
            continue;
        if (seq == tx->una && seg->lane != 0)
            seg_resend_direct(ui, tx->ep, seg);
        else
            resend_add(ui, tx->ep, &b, seg);
        sent++;
    }
    resend_flush(ui, tx->ep, &b);
}

/* Doubles the timeout up to UDP_RTO_MAX_US, or, from a peer silent for
 * long (busy, most likely), up to the probe interval of that silence:
 * each resend is also a probe for the kernel's refusal (udp_live.c). */
static uint64_t rto_backoff(uint64_t rto_us, uint64_t silence_us)
{
    uint64_t cap = udp_probe_interval(silence_us);

    if (cap < UDP_RTO_MAX_US)
        cap = UDP_RTO_MAX_US;
    return rto_us * 2 > cap ? cap : rto_us * 2;
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
    /* The timer is left armed when everything is acknowledged (a
     * ping-pong would otherwise arm and cancel it for every message):
     * what counts is the time since the flight last made progress. */
    if (now < tx->last_progress_us + tx_timer_span(ui, tx)) {
        util_timer_arm(&ui->wheel, &tx->timer, tx->last_progress_us + tx_timer_span(ui, tx));
        return;
    }
    /* Silence is what counts: a peer that still answers, even only with
     * ACKs of duplicates, is alive however lossy the path. */
    if (udp_ep_silence(tx->ep, now) > ui->cfg.peer_timeout_us &&
        now - tx->last_progress_us > ui->cfg.peer_timeout_us) {
        udp_ep_fail(ui, tx->ep, "silent for longer than TMX_UDP_PEER_TIMEOUT_MS");
        return;
    }
    if (!tx->probed) {
        tx->probed = 1;
        ui->stats.probes++;
        tail_probe(ui, tx);
        tx_timer_rearm(ui, tx, now);
        return;
    }
    ui->stats.timeouts++;
    util_debug("udp: timeout on channel %d to peer %016llx after %llu us (timeout %llu us)", tx->ch,
               (unsigned long long)tx->ep->super.uuid, (unsigned long long)(now - tx->last_progress_us),
               (unsigned long long)tx->rto_us);
    rto_resend(ui, tx, now);
    tx->rto_us = rto_backoff(tx->rto_us, udp_ep_silence(tx->ep, now));
    util_timer_arm(&ui->wheel, &tx->timer, now + tx->rto_us);
}

void udp_tx_acked(udp_iface_t *ui, udp_ep_t *ep, int ch, uint32_t ack)
{
    udp_tx_t *tx = &ep->flow->tx[ch];

    if (seq_before(tx->una, ack) && !seq_before(tx->next_seq, ack)) {
        uint64_t sent_us = tx->win[udp_tx_slot(tx, ack - 1)]->sent_us;
        int clean = 1;
        for (; tx->una != ack; tx->una++) {
            udp_seg_t *seg = tx->win[udp_tx_slot(tx, tx->una)];
            clean &= !seg->resent && !seg->sacked;
            rack_update(tx, seg);
            udp_seg_free(ui, seg);
            tx->win[udp_tx_slot(tx, tx->una)] = NULL;
        }
        if (clean && ui->rx_now_us > sent_us)
            rtt_sample(udp_ep_conn(ui, ep), ui->rx_now_us - sent_us);
        tx->dup_acks = 0;
        tx->rto_us = udp_rto_base(ui, ep);
        tx->probed = 0;
        tx->last_progress_us = ui->rx_now_us;
        if (tx->una == tx->next_seq) {
            /* a flight that grew the window is over: back to a first
             * window's size (a peer idle after a burst holds 64 bytes,
             * not the burst's array); kept if memory is short */
            if (tx->win_mask + 1 >= UDP_WIN_SHRINK_AT)
                (void)tx_win_resize(tx, win_first(ui));
            return; /* the timer stays: tx_timer_fire finds nothing to do */
        }
        tx_timer_rearm(ui, tx, tx->last_progress_us);
        rack_resend(ui, ep, tx);
        return;
    }
    if (ack == tx->una && tx->una != tx->next_seq && ++tx->dup_acks == UDP_DUP_ACKS)
        udp_seg_retransmit(ui, ep, tx->win[udp_tx_slot(tx, tx->una)]);
}

/* ------------------------------------------------------------------ ACKs */

void udp_ack_schedule(udp_iface_t *ui, udp_ep_t *ep)
{
    udp_flow_t *fl = udp_ep_flow(ep);

    if (fl->ack_queued)
        return;
    fl->ack_queued = 1;
    fl->ack_due_us = ui->rx_now_us + ui->cfg.ack_delay_us;
    util_dlist_push_tail(&ui->acks, &fl->ack_link);
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
        const udp_seg_t *seg = rx->ooo[udp_rx_slot(rx, rx->expected + 1 + i)];
        if (seg != NULL && seg->seq == rx->expected + 1 + i)
            s->bits[i / 8] |= (uint8_t)(1u << (i % 8));
    }
    s->base = htole32(rx->expected);
    s->nbits = htole32(span);
    return offsetof(udp_sack_t, bits) + (span + 7) / 8;
}

/* extra: UDP_FLAG_STALL, whose seq names the data channel's last arrival;
 * UDP_FLAG_BYE, whose seq and frag_id name the next segment of the
 * priority and data channels: all below were sent, and must arrive before
 * the receiver takes the bye for a clean exit. */
static void ack_send(udp_iface_t *ui, udp_ep_t *ep, uint16_t extra)
{
    uint32_t seq = extra & UDP_FLAG_STALL ? ep->flow->rx_data_seq
                   : extra & UDP_FLAG_BYE ? udp_ep_next_seq(ep, UDP_CH_PRIO) : 0;
    uint32_t frag = extra & UDP_FLAG_BYE ? udp_ep_next_seq(ep, UDP_CH_DATA) : 0;
    udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_PRIO, htole16(UDP_FLAG_ACK_ONLY), 0, ui->sock.self_sa.sin_port,
                   htole64(ui->job_key), htole64(ui->uuid), htole64(ep->super.uuid), htole32(seq), {0, 0},
                   htole32(frag), 0, 0, 0, htons(ui->sock.index), htons(ep->index), 0};
    unsigned char buf[sizeof(h) + sizeof(udp_sack_t)];
    size_t n = ep->has_flow ? sack_fill(ui, &ep->flow->rx[UDP_CH_DATA], (udp_sack_t *)(buf + sizeof(h))) : 0;

    udp_hdr_fill_acks(ep, &h);
    h.flags = htole16(UDP_FLAG_ACK_ONLY | (n != 0 ? UDP_FLAG_SACK : 0) | extra |
                      (ui->super.rx_pressure ? UDP_FLAG_PRESSURE : 0));
    h.len = htole16((uint16_t)n);
    memcpy(buf, &h, sizeof(h));
    h.csum = htole32(util_crc32c(0, buf, sizeof(h) + n));
    memcpy(buf, &h, sizeof(h));
    udp_datagram_send(ui, ep, buf, sizeof(h) + n);
}

/* Marks what the receiver holds, then resends what that shows lost. */
void udp_tx_sacked(udp_iface_t *ui, udp_ep_t *ep, const unsigned char *p, size_t len)
{
    udp_tx_t *tx = &ep->flow->tx[UDP_CH_DATA];
    udp_sack_t s;

    if (len < offsetof(udp_sack_t, bits) || len > sizeof(s))
        return;
    memcpy(&s, p, len);
    s.base = le32toh(s.base);
    s.nbits = le32toh(s.nbits);
    if (s.nbits > UDP_SACK_BITS || len < offsetof(udp_sack_t, bits) + (s.nbits + 7) / 8)
        return;
    for (uint32_t i = 0; i < s.nbits; i++) {
        uint32_t seq = s.base + 1 + i;
        udp_seg_t *seg;
        if (!(s.bits[i / 8] & (1u << (i % 8))) || seq_before(seq, tx->una) || !seq_before(seq, tx->next_seq))
            continue;
        seg = tx->win[udp_tx_slot(tx, seq)];
        if (!seg->sacked) {
            seg->sacked = 1;
            rack_update(tx, seg);
        }
    }
    rack_resend(ui, ep, tx);
}

void udp_bye_send(udp_iface_t *ui, udp_ep_t *ep)
{
    ack_send(ui, ep, UDP_FLAG_BYE);
}

/* Between two stall reports of a wait silent for silence_us: UDP_STALL_US
 * at first, then an eighth of the silence, up to UDP_STALL_MAX_US. A lost
 * segment or resend is repaired by the first reports; an owner silent for
 * longer is busy (it does not call tmx) or gone, and is sent a report now
 * and then, not one every UDP_STALL_US for as long as it is silent. */
static uint64_t stall_interval(uint64_t silence_us)
{
    uint64_t t = silence_us / 8;

    return t < UDP_STALL_US ? UDP_STALL_US : t > UDP_STALL_MAX_US ? UDP_STALL_MAX_US : t;
}

void udp_rx_stall_check(udp_iface_t *ui, udp_ep_t *ep, uint64_t since, uint64_t now, uint64_t *reported)
{
    udp_flow_t *fl = udp_ep_flow(ep);
    uint64_t gap;

    if (fl != NULL && fl->rx_data_us > since)
        since = fl->rx_data_us;
    if (!ep->rx_data_seen || since >= now || now - since < UDP_STALL_US)
        return; /* nothing to name yet: the sender's probe and timeout cover it */
    gap = stall_interval(now - since);
    if (now - *reported < gap || (fl != NULL && now - fl->stall_sent_us < gap))
        return;
    if ((fl = udp_flow(ui, ep)) == NULL)
        return;
    *reported = fl->stall_sent_us = now;
    ui->stats.stalls_sent++;
    ack_send(ui, ep, UDP_FLAG_STALL);
    /* The flow stays, made for the report or not: while the owner is
     * silent it paces the reports of every read waiting on it, one per
     * stall_interval for the peer. The owner's next datagram settles it. */
}

/* The receiver heard nothing for UDP_STALL_US after segment last: below
 * it, RACK finds the holes; after it, what was sent within that time
 * would have arrived, so it is lost (the latest sending of last is
 * taken, so a doubt leaves segments to the timers, never resends them
 * needlessly). */
void udp_tx_stalled(udp_iface_t *ui, udp_ep_t *ep, uint32_t last)
{
    udp_tx_t *tx = &ep->flow->tx[UDP_CH_DATA];
    uint64_t t0 = tx->rack_us;
    resend_batch_t b = {.n = 0};
    uint32_t sent = 0;

    if (tx->win == NULL || tx->una == tx->next_seq)
        return;
    /* Reports closer together than the receiver sends them are copies;
     * a segment resent once is outside the window below anyway. */
    if (ui->rx_now_us - ep->flow->stall_handled_us < UDP_STALL_US / 2)
        return;
    ep->flow->stall_handled_us = ui->rx_now_us;
    /* The ACK this report carries (taken before it) stops at una, which
     * the receiver therefore lacks whatever a SACK said: a segment kept
     * early is given up if no room is left to start its packet, or the
     * layer above is at its bound (drain_ooo). Lost, then, as any other. */
    tx->win[udp_tx_slot(tx, tx->una)]->sacked = 0;
    if (!seq_before(last, tx->una) && seq_before(last, tx->next_seq)) {
        udp_seg_t *seg = tx->win[udp_tx_slot(tx, last)];
        t0 = seg->sent_us;
        rack_update(tx, seg);
        rack_resend(ui, ep, tx);
    }
    for (uint32_t seq = tx->una; seq != tx->next_seq && sent < UDP_SACK_BURST; seq++) {
        udp_seg_t *seg = tx->win[udp_tx_slot(tx, seq)];
        if (seg->sacked || seg->sent_us < t0 || seg->sent_us >= t0 + UDP_STALL_US / 2 || seq == last)
            continue;
        resend_add(ui, ep, &b, seg);
        sent++;
    }
    resend_flush(ui, ep, &b);
}

/* Sends the ACKs that fell due (delayed ACK) or must go now. */
int udp_ack_flush(udp_iface_t *ui, uint64_t now)
{
    util_dlist_t *pos, *tmp;
    int n = 0;

    util_dlist_foreach_safe(pos, tmp, &ui->acks) {
        udp_flow_t *fl = util_container_of(pos, udp_flow_t, ack_link);
        if (!fl->rx[0].ack_now && !fl->rx[1].ack_now && fl->ack_due_us > now)
            continue;
        util_dlist_unlink(&fl->ack_link);
        fl->ack_queued = 0;
        for (int ch = 0; ch < UDP_N_CH; ch++) {
            fl->rx[ch].ack_now = 0;
            fl->rx[ch].unacked = 0;
        }
        ack_send(ui, fl->ep, 0);
        udp_flow_settle(ui, fl->ep); /* fl may be gone */
        n++;
    }
    return n;
}

/* --------------------------------------------------------------- receive */

/* What an early segment of a datagram of len bytes holds, counted in
 * udp_iface_t.ooo_bytes: its buffer, of a datagram's size whatever its
 * payload (udp_seg_alloc), not the payload alone, which a peer can make
 * as small as it likes. */
static uint64_t ooo_cost(const udp_iface_t *ui, size_t len)
{
    size_t buf = len <= sizeof(udp_hdr_t) ? sizeof(udp_hdr_t) : len <= ui->seg_cap ? ui->seg_cap : len;

    return sizeof(udp_seg_t) + buf;
}

/* rx's array of early segments goes, and what it held is given back. */
static void ooo_array_free(udp_iface_t *ui, udp_rx_t *rx)
{
    ui->ooo_bytes -= (uint64_t)(rx->ooo_mask + 1) * sizeof(*rx->ooo);
    free(rx->ooo);
    rx->ooo = NULL;
    rx->ooo_mask = 0;
}

void udp_rx_fini(udp_iface_t *ui, udp_rx_t *rx)
{
    if (rx->ooo != NULL) {
        for (uint32_t i = 0; i <= rx->ooo_mask; i++) {
            if (rx->ooo[i] != NULL) {
                ui->ooo_bytes -= ooo_cost(ui, rx->ooo[i]->len); /* as drain_ooo gives it back */
                udp_seg_free(ui, rx->ooo[i]);
            }
        }
        ooo_array_free(ui, rx);
        rx->n_ooo = 0;
    }
    ui->reasm_bytes -= rx->reasm_charged;
    rx->reasm_charged = 0;
    free(rx->reasm);
    rx->reasm = NULL;
}

static void reasm_reset(udp_iface_t *ui, udp_rx_t *rx)
{
    ui->reasm_bytes -= rx->reasm_charged;
    rx->reasm_charged = 0;
    free(rx->reasm);
    rx->reasm = NULL;
    rx->reasm_len = 0;
    rx->reasm_total = 0;
}

/* Whether the first segment of a packet in several segments finds room.
 * A peer the core made an endpoint to holds at most one unfinished packet
 * per channel; what strangers (any process that writes to our port) hold
 * in all is bounded, since each can start packets and never end them, and
 * their number is bounded only by UDP_MAX_EPS. Not taken, it is not
 * acknowledged, and its sender sends it again. */
static int reasm_room(udp_iface_t *ui, const udp_ep_t *ep, const udp_hdr_t *h)
{
    if (ep->connected || !(h->flags & UDP_FLAG_FIRST) ||
        (h->flags & (UDP_FLAG_LAST | UDP_FLAG_GET_REQ | UDP_FLAG_GET_DATA | UDP_FLAG_PUT_DATA)) ||
        ui->reasm_bytes + h->offset <= UDP_REASM_MAX_BYTES)
        return 1;
    ui->stats.dropped++;
    if (util_log_sparse(&ui->reasm_full))
        util_warn("udp: packets being put together hold %llu bytes, the most they may: a packet of %llu "
                  "bytes waits to be sent again (%llu times so far)", (unsigned long long)ui->reasm_bytes,
                  (unsigned long long)h->offset, (unsigned long long)ui->reasm_full);
    return 0;
}

/* Logged the first time and then sparsely: a peer can send broken pieces
 * as often as it likes. */
static void reasm_fail(udp_iface_t *ui, udp_rx_t *rx, const char *why)
{
    ui->stats.dropped++;
    if (util_log_sparse(&ui->reasm_failed))
        util_error("udp: reassembly failed (%s); packet lost (%llu so far)", why,
                   (unsigned long long)ui->reasm_failed);
    reasm_reset(ui, rx);
}

void udp_rx_reasm_drop(udp_iface_t *ui, udp_ep_t *ep)
{
    for (int ch = 0; ch < UDP_N_CH && ep->has_flow; ch++)
        reasm_reset(ui, &ep->flow->rx[ch]);
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
                reasm_fail(ui, rx, "a packet of one segment whose length is not its payload's");
            else if (h->len != 0) /* empty: a keepalive */
                ui->super.recv_cb(ui->super.recv_arg, ep->super.uuid, p, h->len);
            return;
        }
        /* a packet of several segments has more bytes than its first */
        if (h->offset > UDP_MAX_PACKET || h->len >= h->offset || (rx->reasm = malloc(h->offset)) == NULL) {
            reasm_fail(ui, rx, "bad packet length");
            return;
        }
        rx->reasm_total = h->offset;
        if (!ep->connected) {
            rx->reasm_charged = h->offset;
            ui->reasm_bytes += h->offset;
        }
    } else if (rx->reasm == NULL || h->offset != rx->reasm_len || h->len == 0 ||
               h->len > rx->reasm_total - rx->reasm_len) {
        reasm_fail(ui, rx, "segment out of place");
        return;
    }
    memcpy(rx->reasm + rx->reasm_len, p, h->len);
    rx->reasm_len += h->len;
    if (!(h->flags & UDP_FLAG_LAST))
        return;
    if (rx->reasm_len == rx->reasm_total)
        ui->super.recv_cb(ui->super.recv_arg, ep->super.uuid, rx->reasm, rx->reasm_len);
    else
        reasm_fail(ui, rx, "short packet");
    reasm_reset(ui, rx);
}

static void deliver(udp_iface_t *ui, udp_ep_t *ep, const udp_hdr_t *h, const unsigned char *p)
{
    udp_rx_t *rx = &ep->flow->rx[h->channel];

    if (h->flags & UDP_FLAG_GET_REQ)
        udp_get_req_arrive(ui, ep, p, h->len);
    else if (h->flags & UDP_FLAG_GET_DATA)
        udp_get_data_arrive(ui, ep, h, p);
    else if (h->flags & UDP_FLAG_PUT_DATA)
        udp_put_data_arrive(ui, ep, h, p);
    else {
        if (ep->put_rx && h->channel == UDP_CH_DATA)
            udp_put_rx_end(ui, ep);
        deliver_packet_seg(ui, ep, rx, h, p);
    }
}

/* Room in rx's array for a segment ahead segments after the next due
 * (ahead < the window): it grows, doubling, as win does. 0 without
 * memory (the segment is dropped, and sent again). */
static int ooo_room(udp_iface_t *ui, udp_rx_t *rx, uint32_t ahead)
{
    uint32_t slots = rx->ooo == NULL ? 0 : rx->ooo_mask + 1, n;
    udp_seg_t **ooo;

    if (ahead < slots)
        return 1;
    n = slots != 0 ? slots : UDP_WIN_FIRST < ui->cfg.window ? UDP_WIN_FIRST : ui->cfg.window;
    while (n <= ahead)
        n *= 2;
    /* the array counts as the segments do: a peer's grows to the window
     * with one segment at its far end */
    if (ui->ooo_bytes + (uint64_t)(n - slots) * sizeof(*ooo) > UDP_OOO_MAX_BYTES ||
        (ooo = calloc(n, sizeof(*ooo))) == NULL)
        return 0;
    ui->ooo_bytes += (uint64_t)(n - slots) * sizeof(*ooo);
    for (uint32_t i = 0; i < slots; i++) {
        if (rx->ooo[i] != NULL)
            ooo[rx->ooo[i]->seq & (n - 1)] = rx->ooo[i];
    }
    free(rx->ooo);
    rx->ooo = ooo;
    rx->ooo_mask = n - 1;
    return 1;
}

/* A segment kept for later is the whole datagram: header, then payload. */
/* 1 when the segment is kept (or already was). */
static int ooo_store(udp_iface_t *ui, const udp_ep_t *ep, udp_rx_t *rx, const udp_hdr_t *h,
                     const unsigned char *p)
{
    udp_seg_t **slot;
    udp_seg_t *seg;

    if (seq_before(rx->highest, h->seq))
        rx->highest = h->seq;
    if (ui->ooo_bytes + ooo_cost(ui, sizeof(*h) + h->len) > UDP_OOO_MAX_BYTES || !reasm_room(ui, ep, h))
        return 0; /* dropped: the sender will retransmit */
    if (!ooo_room(ui, rx, h->seq - rx->expected))
        return 0;
    slot = &rx->ooo[udp_rx_slot(rx, h->seq)];
    if (*slot != NULL)
        return 1; /* a duplicate of one already kept */
    seg = udp_seg_alloc(ui, sizeof(*h) + h->len);
    if (seg == NULL)
        return 0; /* dropped: the sender will retransmit */
    seg->seq = h->seq;
    seg->len = (uint32_t)(sizeof(*h) + h->len);
    memcpy(seg->buf, h, sizeof(*h));
    memcpy(seg->buf + sizeof(*h), p, h->len);
    *slot = seg;
    rx->n_ooo++;
    ui->ooo_bytes += ooo_cost(ui, seg->len);
    return 1;
}

static int rx_leave(udp_iface_t *ui, udp_ep_t *ep, const udp_rx_t *rx, const udp_hdr_t *h,
                    const unsigned char *p);

static void drain_ooo(udp_iface_t *ui, udp_ep_t *ep, udp_rx_t *rx)
{
    udp_seg_t **slot;

    if (rx->n_ooo == 0)
        return;
    while (*(slot = &rx->ooo[udp_rx_slot(rx, rx->expected)]) != NULL && (*slot)->seq == rx->expected) {
        udp_seg_t *seg = *slot;
        *slot = NULL;
        rx->n_ooo--;
        ui->ooo_bytes -= ooo_cost(ui, seg->len);
        /* its room was asked when it was kept, but others may have taken
         * it since, and the layer above may be at its bound of unexpected
         * memory now: given up then, as if it never came (not
         * acknowledged, its sender resends it) */
        if (!reasm_room(ui, ep, (const udp_hdr_t *)seg->buf) ||
            rx_leave(ui, ep, rx, (const udp_hdr_t *)seg->buf, seg->buf + sizeof(udp_hdr_t))) {
            udp_seg_free(ui, seg);
            break;
        }
        rx->expected++;
        deliver(ui, ep, (const udp_hdr_t *)seg->buf, seg->buf + sizeof(udp_hdr_t));
        udp_seg_free(ui, seg);
        rx->unacked++;
    }
    if (rx->n_ooo == 0 && rx->ooo_mask + 1 >= UDP_WIN_SHRINK_AT) /* the next early one makes a small one */
        ooo_array_free(ui, rx);
}

/* The last data segment that arrived and was kept, for stall reports. */
static void data_arrived(udp_iface_t *ui, udp_ep_t *ep, const udp_hdr_t *h)
{
    if (h->channel != UDP_CH_DATA)
        return;
    ep->flow->rx_data_us = ui->rx_now_us;
    ep->flow->rx_data_seq = h->seq;
    ep->rx_data_seen = 1;
}

/* Take or leave: while the layer above is at its bound of unexpected
 * memory (rx_full), the first segment of a data packet it will not take
 * now is treated as never received: not delivered, not acknowledged, and
 * the segments behind it are not kept either. The sender's window fills
 * and it waits with the data in its own buffers; what it resends is
 * offered again, and udp_rx_resume asks for it once the bound is left. */
static int rx_leave(udp_iface_t *ui, udp_ep_t *ep, const udp_rx_t *rx, const udp_hdr_t *h,
                    const unsigned char *p)
{
    if (!ui->super.rx_full || h->channel != UDP_CH_DATA || rx->reasm != NULL ||
        !(h->flags & UDP_FLAG_FIRST) || (h->flags & (UDP_FLAG_GET_REQ | UDP_FLAG_GET_DATA | UDP_FLAG_PUT_DATA)) ||
        ui->super.admit_cb(ui->super.recv_arg, ep->super.uuid, p, h->len))
        return 0;
    if (!ep->rx_left) {
        ep->rx_left = 1;
        ui->n_left++;
    }
    return 1;
}

/* The bound was left: every peer whose data we left gets a stall report
 * naming the highest segment it sent, so that it resends at once what we
 * did not take instead of waiting for its timeout. */
void udp_rx_resume(udp_iface_t *ui)
{
    /* a peer whose data waits keeps its flow (udp_flow_settle) */
    for (udp_flow_t *fl = udp_flow_walk(ui, NULL); fl != NULL; fl = udp_flow_walk(ui, fl)) {
        udp_ep_t *ep = fl->ep;
        if (!ep->rx_left)
            continue;
        ep->rx_left = 0;
        ep->rx_refill = 1;
        fl->rx_data_seq = fl->rx[UDP_CH_DATA].highest;
        ack_send(ui, ep, UDP_FLAG_STALL);
    }
    ui->n_left = 0;
}

/* Whether a data segment at or after the next one due waits with its
 * sender. The next one due is asked about every time (a receive posted
 * meanwhile takes it); until what was left is taken, later segments are
 * not kept early: a window's worth would cost a segment buffer each. */
static int rx_held(udp_iface_t *ui, udp_ep_t *ep, const udp_rx_t *rx, const udp_hdr_t *h,
                   const unsigned char *p, int32_t ahead)
{
    if (ep->rx_refill && !seq_before(rx->expected, rx->highest))
        ep->rx_refill = 0;
    if (ahead > 0)
        return ep->rx_refill || (ui->super.rx_full && ep->rx_left);
    return rx_leave(ui, ep, rx, h, p);
}

void udp_rx_segment(udp_iface_t *ui, udp_ep_t *ep, const udp_hdr_t *h, const unsigned char *p)
{
    udp_flow_t *fl = udp_flow(ui, ep);
    udp_rx_t *rx;
    int32_t ahead;

    if (fl == NULL) {
        ui->stats.dropped++; /* no memory: the sender resends it */
        return;
    }
    rx = &fl->rx[h->channel];
    ahead = (int32_t)(h->seq - rx->expected);

    if (h->channel == UDP_CH_DATA && ahead >= 0 && rx_held(ui, ep, rx, h, p, ahead)) {
        /* noted to ask for it later; never a number past the window, which
         * no sender sent and which would keep the asking going for ever */
        if (seq_before(rx->highest, h->seq) && (uint32_t)ahead < ui->cfg.window)
            rx->highest = h->seq;
        udp_ack_schedule(ui, ep);
        return;
    }
    if (ahead == 0 && ep->rx_refill && h->channel == UDP_CH_DATA &&
        (rx->expected & (UDP_REFILL_EVERY - 1)) == 0) {
        fl->rx_data_seq = rx->highest; /* more of it, at once */
        ack_send(ui, ep, UDP_FLAG_STALL);
    }
    if (ahead == 0 && !reasm_room(ui, ep, h))
        return;
    if (ahead == 0) {
        data_arrived(ui, ep, h);
        rx->expected++;
        deliver(ui, ep, h, p);
        drain_ooo(ui, ep, rx);
        if (++rx->unacked >= UDP_ACK_EVERY)
            rx->ack_now = 1;
    } else if (ahead > 0 && (uint32_t)ahead < ui->cfg.window) {
        if (ooo_store(ui, ep, rx, h, p))
            data_arrived(ui, ep, h);
        rx->ack_now = 1; /* a duplicate ACK tells the sender of the gap */
    } else {
        rx->ack_now = 1; /* an old duplicate: our ACK was lost */
    }
    udp_ack_schedule(ui, ep);
}

/* ----------------------------------------------------------------- flows */

udp_flow_t *udp_flow_make(udp_iface_t *ui, udp_ep_t *ep)
{
    udp_flow_t *fl = calloc(1, sizeof(*fl));

    if (fl == NULL)
        return NULL;
    fl->ep = ep;
    for (int ch = 0; ch < UDP_N_CH; ch++) {
        tx_init(ui, fl, ch);
        fl->rx[ch].expected = fl->rx[ch].highest = ep->idle.expected[ch];
    }
    fl->rx_data_seq = ep->idle.expected[UDP_CH_DATA] - 1; /* the last one delivered */
    util_dlist_init(&fl->ack_link);
    util_dlist_push_tail(&ui->flows, &fl->link);
    ep->flow = fl; /* the sequence numbers are the flow's now */
    ep->has_flow = 1;
    ui->n_flows++;
    return fl;
}

void udp_flow_free(udp_iface_t *ui, udp_ep_t *ep)
{
    udp_flow_t *fl = udp_ep_flow(ep);

    if (fl == NULL)
        return;
    for (int ch = 0; ch < UDP_N_CH; ch++) {
        util_timer_cancel(&fl->tx[ch].timer);
        udp_tx_fini(&fl->tx[ch]);
        udp_rx_fini(ui, &fl->rx[ch]);
    }
    if (fl->ack_queued)
        util_dlist_unlink(&fl->ack_link);
    if (ui->walk_next == fl)
        ui->walk_next = udp_flow_at(ui, fl->link.next);
    util_dlist_unlink(&fl->link);
    ep->has_flow = 0;
    for (int ch = 0; ch < UDP_N_CH; ch++) { /* over the flow's pointer */
        ep->idle.next_seq[ch] = fl->tx[ch].next_seq;
        ep->idle.expected[ch] = fl->rx[ch].expected;
    }
    free(fl);
    /* the last exchange is over: the segment buffers go but a chunk of
     * each pool, whatever a burst took */
    if (--ui->n_flows == 0) {
        util_pool_trim_to(&ui->segs, 1);
        util_pool_trim_to(&ui->hsegs, 1);
    }
}

void udp_flow_empty(udp_iface_t *ui, udp_ep_t *ep)
{
    udp_flow_t *fl = udp_ep_flow(ep);

    for (int ch = 0; ch < UDP_N_CH && fl != NULL; ch++) {
        util_timer_cancel(&fl->tx[ch].timer);
        udp_tx_fini(&fl->tx[ch]);
        udp_rx_fini(ui, &fl->rx[ch]);
    }
}

void udp_flow_settle(udp_iface_t *ui, udp_ep_t *ep)
{
    const udp_flow_t *fl = udp_ep_flow(ep);

    if (fl == NULL || fl->ack_queued || fl->n_refused != 0 || fl->bye || ep->put_rx || ep->rx_left ||
        ep->rx_refill || ep->failed)
        return;
    for (int ch = 0; ch < UDP_N_CH; ch++) {
        if (fl->tx[ch].una != fl->tx[ch].next_seq || fl->rx[ch].n_ooo != 0 || fl->rx[ch].reasm != NULL)
            return;
    }
    udp_flow_free(ui, ep);
}
