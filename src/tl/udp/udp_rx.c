/*
 * The udp transport's receive path: every datagram checked before any of
 * it is trusted, then its ACKs, reports and segment handed on; buffers the
 * kernel coalesced (GRO) cut back into datagrams.
 */
#include <arpa/inet.h>
#include <stddef.h>
#include <string.h>

#include "tl/udp/udp.h"
#include "util/crc32c.h"
#include "util/log.h"


static int dgram_drop(udp_iface_t *ui, const char *why, size_t len)
{
    ui->stats.dropped++;
    util_debug("udp: dropped a %zu-byte datagram: %s", len, why);
    return -1;
}

/* A datagram for another process of this node: the kernel steered it
 * here while the port's group changed, or merged it with one of ours
 * (UDP GRO joins a flow's datagrams, whoever they are for; udp_node.c).
 * Never delivered here: handed on to its process through the node's port
 * when one holds its index, else dropped (its sender is told); logged at
 * most once a second. */
static int dgram_misrouted(udp_iface_t *ui, const udp_hdr_t *h, unsigned char *buf, size_t len, uint32_t csum,
                           const struct sockaddr_in *from)
{
    uint64_t now = ui->rx_now_us;

    ui->stats.misrouted++;
    if (now >= ui->misrouted_log_us + 1000000) {
        util_info("udp: %llu datagrams for other processes of this node reached us so far, %llu handed on "
                  "(the last for index %u; ours is %u)", (unsigned long long)ui->stats.misrouted,
                  (unsigned long long)ui->stats.handed_on, h->dst_index, ui->sock.index);
        ui->misrouted_log_us = now;
    }
    memcpy(buf + offsetof(udp_hdr_t, csum), &(uint32_t){htole32(csum)}, sizeof(csum)); /* as it came */
    udp_node_misrouted(ui, h, from, buf, len);
    return dgram_drop(ui, "steered to the wrong process", len);
}

/* A datagram for a context that held our port and node index before us:
 * its process died, and we (restarted at its address, or a newcomer that
 * took its index) hold them now. Nobody refuses the port, which lives, so
 * its sender is told as a dead index's would be (udp_node.c), else it
 * would find the context gone only by the silence limit. A notice is never
 * answered. */
static int dgram_stale(udp_iface_t *ui, const udp_hdr_t *h, const struct sockaddr_in *from, size_t len)
{
    if (!(h->flags & UDP_FLAG_NOBODY))
        udp_nobody_send(ui, h, from);
    return dgram_drop(ui, "addressed to another context", len);
}

/* Flags that can go together, as our senders set them: an ACK (ACK_ONLY,
 * with its SACK, STALL, BYE or NOBODY) is no segment and carries a
 * payload only as a SACK; a segment is at most one of a read request,
 * read data and written data, and data of a read or a write is a piece
 * at an offset, never a packet's FIRST or LAST. (HANDED and PRESSURE go
 * with any.) */
static int flags_consistent(uint16_t f, size_t payload)
{
    const uint16_t ack_kinds = UDP_FLAG_SACK | UDP_FLAG_STALL | UDP_FLAG_BYE | UDP_FLAG_NOBODY;
    const uint16_t seg_kinds = UDP_FLAG_FIRST | UDP_FLAG_LAST | UDP_FLAG_GET_REQ | UDP_FLAG_GET_DATA | UDP_FLAG_PUT_DATA;
    int kinds = !!(f & UDP_FLAG_GET_REQ) + !!(f & UDP_FLAG_GET_DATA) + !!(f & UDP_FLAG_PUT_DATA);

    if (f & UDP_FLAG_ACK_ONLY)
        return !(f & seg_kinds) && (payload == 0 || (f & UDP_FLAG_SACK));
    return !(f & ack_kinds) && kinds <= 1 &&
           !((f & (UDP_FLAG_GET_DATA | UDP_FLAG_PUT_DATA)) && (f & (UDP_FLAG_FIRST | UDP_FLAG_LAST)));
}

/* Checks a datagram before any of it is trusted; converts the header. */
static int dgram_parse(udp_iface_t *ui, unsigned char *buf, size_t len, udp_hdr_t *h,
                       const struct sockaddr_in *from)
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
    h->src_index = ntohs(h->src_index);
    h->dst_index = ntohs(h->dst_index);
    if (h->version != UDP_WIRE_VERSION || h->channel >= UDP_N_CH || (h->flags & ~UDP_FLAG_MASK) || h->port == 0 ||
        h->len != len - sizeof(*h) || (h->pad != 0) != ((h->flags & UDP_FLAG_HANDED) != 0))
        return dgram_drop(ui, "malformed header", len);
    if (!flags_consistent(h->flags, h->len))
        return dgram_drop(ui, "flags that contradict each other", len);
    if ((h->flags & UDP_FLAG_HANDED) && (from->sin_addr.s_addr != ui->sock.self_sa.sin_addr.s_addr ||
                                          from->sin_port != ui->sock.self_sa.sin_port))
        return dgram_drop(ui, "handed on, but not by the node's port", len);
    if (h->job_key != ui->job_key)
        return dgram_drop(ui, "another job's key", len);
    if (h->dst_index != ui->sock.index)
        return dgram_misrouted(ui, h, buf, len, csum, from);
    if (h->dst_id != ui->uuid)
        return dgram_stale(ui, h, from, len);
    return 0;
}

/* A datagram that names a process as its sender but does not come from
 * that process's host: another process forging it (or a peer whose
 * address changed, which tmx does not support). Dropped, and logged the
 * first time and then at most once a second. */
static void dgram_forged(udp_iface_t *ui, const udp_hdr_t *h, uint32_t src_ip, size_t len)
{
    uint64_t now = ui->rx_now_us;

    if (ui->stats.forged++ == 0 || now >= ui->forged_log_us + 1000000) {
        struct in_addr a = {src_ip};
        util_warn("udp: %llu datagrams so far named a process as sender but came from another host (the "
                  "last from %s, naming %016llx): dropped", (unsigned long long)ui->stats.forged, inet_ntoa(a),
                  (unsigned long long)h->src_id);
        ui->forged_log_us = now;
    }
    dgram_drop(ui, "from another host than its sender's", len);
}

/* The address the layer above was given for uuid, if any: a datagram
 * from it must come from that host (PUB_FORGED if not; PUB_KNOWN if it
 * does, *sa and *index then the published ones). A process it was given
 * no address for (PUB_NONE) is taken at the address its datagram names. */
enum { PUB_FORGED, PUB_NONE, PUB_KNOWN };

static int published(udp_iface_t *ui, uint64_t uuid, struct sockaddr_in *sa, uint16_t *index)
{
    const void *addr;
    size_t len;
    udp_addr_t a;

    if (ui->super.peer_addr == NULL ||
        ui->super.peer_addr(ui->super.recv_arg, &ui->super, uuid, &addr, &len) != TMX_OK || len != sizeof(a))
        return PUB_NONE;
    memcpy(&a, addr, sizeof(a));
    if (a.ip != sa->sin_addr.s_addr)
        return PUB_FORGED;
    sa->sin_port = a.port;
    *index = ntohs(a.index);
    return PUB_KNOWN;
}

void udp_dgram_input(udp_iface_t *ui, unsigned char *buf, size_t len, const struct sockaddr_in *from)
{
    udp_hdr_t h;
    udp_ep_t *ep;
    uint32_t src_ip;

    if (dgram_parse(ui, buf, len, &h, from) != 0)
        return;
    /* where it came from before a node-mate handed it on */
    src_ip = (h.flags & UDP_FLAG_HANDED) ? h.pad : from->sin_addr.s_addr;
    ep = udp_ep_find_rx(ui, h.src_id);
    if (h.flags & UDP_FLAG_NOBODY) { /* from a process of the peer's node, not from the peer */
        if (ep != NULL && udp_ep_conn(ui, ep)->sa.sin_addr.s_addr != src_ip)
            dgram_forged(ui, &h, src_ip, len); /* that node is elsewhere */
        else if ((h.flags & ~(UDP_FLAG_HANDED | UDP_FLAG_PRESSURE)) == (UDP_FLAG_NOBODY | UDP_FLAG_ACK_ONLY))
            udp_live_nobody(ui, h.src_id);
        else
            dgram_drop(ui, "a NOBODY notice with other flags", len);
        return;
    }
    if (ep == NULL && (h.flags & UDP_FLAG_ACK_ONLY)) {
        /* an ACK, a report or a bye names segments we exchanged: with no
         * endpoint there were none (a bye made one failed, and kept its
         * process out once added) */
        dgram_drop(ui, "an ACK from a process we have no endpoint for", len);
        return;
    }
    if (ep == NULL) {
        struct sockaddr_in sa = *from;
        uint16_t index = h.src_index;
        sa.sin_port = h.port; /* not the port it left from: see udp_wire.h */
        sa.sin_addr.s_addr = src_ip;
        int pub = published(ui, h.src_id, &sa, &index);
        if (pub == PUB_FORGED) {
            dgram_forged(ui, &h, src_ip, len);
            return;
        }
        /* a process the layer above knows is taken past the bound, as
         * the endpoints it makes are: their number is its to bound */
        if (pub == PUB_KNOWN || ui->n_eps < UDP_MAX_EPS || udp_ep_evict_stranger(ui))
            ep = udp_ep_new(ui, h.src_id, &sa, index);
    }
    if (ep == NULL) {
        if (util_log_sparse(&ui->no_room))
            util_warn("udp: no room for a new peer (%u known, %u at most, no stranger to forget among %u, or "
                      "no memory): datagrams from %016llx dropped (%llu so far)", ui->n_eps, UDP_MAX_EPS,
                      UDP_EVICT_LOOK, (unsigned long long)h.src_id, (unsigned long long)ui->no_room);
        dgram_drop(ui, "no room for a new peer", len);
        return;
    }
    if (udp_ep_conn(ui, ep)->sa.sin_addr.s_addr != src_ip) {
        dgram_forged(ui, &h, src_ip, len);
        return;
    }
    if (ep->failed) {
        dgram_drop(ui, "peer declared failed", len);
        return;
    }
    ui->rx_ep = ep;
    udp_ep_heard(ep, ui->rx_now_us);
    ep->pressed = (h.flags & UDP_FLAG_PRESSURE) != 0;
    udp_live_heard(ep);
    if (ep->has_flow) { /* without a flow nothing is in flight: the ACKs are old */
        for (int ch = 0; ch < UDP_N_CH; ch++)
            udp_tx_acked(ui, ep, ch, h.ack[ch]);
        if (h.flags & UDP_FLAG_SACK)
            udp_tx_sacked(ui, ep, buf + sizeof(h), h.len);
        if (h.flags & UDP_FLAG_STALL)
            udp_tx_stalled(ui, ep, h.seq);
    }
    if ((h.flags & UDP_FLAG_BYE) && (h.flags & UDP_FLAG_ACK_ONLY)) {
        uint32_t next[UDP_N_CH] = {[UDP_CH_PRIO] = h.seq, [UDP_CH_DATA] = h.frag_id};
        udp_live_bye(ui, ep, next);
    } else {
        if (!(h.flags & UDP_FLAG_ACK_ONLY))
            udp_rx_segment(ui, ep, &h, buf + sizeof(h));
        if (udp_ep_bye(ep) && !ep->failed)
            udp_live_bye_check(ui, ep); /* the data a bye overtook */
    }
    udp_flow_settle(ui, ep);
    ui->rx_ep = NULL;
}

void udp_buf_input(udp_iface_t *ui, unsigned char *buf, size_t len, size_t gro,
                   const struct sockaddr_in *from)
{
    if (len > 0 && buf[0] == UDP_PROBE_MAGIC && udp_node_probe_input(ui, buf, len))
        return; /* a slot probe (udp_node.c) */
    if (gro == 0 || gro >= len) {
        udp_dgram_input(ui, buf, len, from);
        return;
    }
    for (size_t off = 0; off < len; off += gro)
        udp_dgram_input(ui, buf + off, len - off < gro ? len - off : gro, from);
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
