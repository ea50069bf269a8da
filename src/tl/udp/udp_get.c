/*
 * Remote reads over udp: the emulated read of tl_emu.h, its request on the
 * priority channel and its data streamed on the data channel, reliably
 * and within the window. Read data is not copied into segments: a segment
 * points at the owner's memory, whose key is checked again before every
 * resending (udp_rel.c).
 */
#include <string.h>

#include "tl/udp/udp.h"
#include "util/log.h"

#define UDP_SERVE_SEGS 32 /* segments per chunk: one GSO batch */

static tmx_status_t req_send(tl_ep_t *tep, const tl_emu_req_t *req)
{
    udp_get_req_t w = {htole64(req->id), htole64(req->raddr), htole64(req->rkey), htole64(req->len)};
    struct iovec iov = {&w, sizeof(w)};
    udp_send_desc_t d = {.ch = UDP_CH_PRIO, .flags = UDP_FLAG_GET_REQ, .iov = &iov, .iovcnt = 1,
                         .len = sizeof(w)};

    return udp_send_segs((udp_iface_t *)tl_ep_iface(tep), (udp_ep_t *)tep, &d);
}

/* The status travels in the header's reserved word (udp_wire.h). */
static tmx_status_t data_send(tl_ep_t *tep, uint32_t id, uint64_t offset, tmx_status_t status,
                              const void *src, size_t n, uint64_t rkey)
{
    struct iovec iov = {(void *)src, n};
    udp_send_desc_t d = {.ch = UDP_CH_DATA, .flags = UDP_FLAG_GET_DATA, .frag_id = id, .offset = offset,
                         .aux = (uint32_t)status, .iov = &iov, .iovcnt = 1, .len = n, .rkey = rkey};

    return udp_send_segs((udp_iface_t *)tl_ep_iface(tep), (udp_ep_t *)tep, &d);
}

static void waiting(tl_ep_t *tep, uint64_t since_us, uint64_t now_us, uint64_t *reported_us)
{
    udp_rx_stall_check((udp_iface_t *)tl_ep_iface(tep), (udp_ep_t *)tep, since_us, now_us, reported_us);
}

/* A write's part: the target address in offset, the target's key in
 * frag_id and reserved (udp_wire.h); src is not copied (lkey). */
static tmx_status_t put_send(tl_ep_t *tep, uint64_t raddr, uint64_t rkey, const void *src, size_t n,
                             uint64_t lkey)
{
    struct iovec iov = {(void *)src, n};
    udp_send_desc_t d = {.ch = UDP_CH_DATA, .flags = UDP_FLAG_PUT_DATA, .frag_id = (uint32_t)rkey,
                         .offset = raddr, .aux = (uint32_t)(rkey >> 32), .iov = &iov, .iovcnt = 1,
                         .len = n, .rkey = lkey};

    return udp_send_segs((udp_iface_t *)tl_ep_iface(tep), (udp_ep_t *)tep, &d);
}

static const tl_emu_ops_t udp_emu_ops = {req_send, data_send, waiting, put_send};

void udp_get_init(udp_iface_t *ui)
{
    tl_emu_init(&ui->emu, &ui->super, &udp_emu_ops, (ui->cfg.mtu - sizeof(udp_hdr_t)) * UDP_SERVE_SEGS);
}

tmx_status_t udp_get(tl_ep_t *tep, void *dst, size_t len, uint64_t raddr, uint64_t rkey,
                     unsigned kind, tl_get_op_t *op)
{
    udp_ep_t *ep = (udp_ep_t *)tep;
    udp_iface_t *ui = (udp_iface_t *)tl_ep_iface(tep);

    if (tl_get_kind_check(tl_ep_iface(tep), kind) != TMX_OK)
        return TMX_ERR_INVALID;
    if (ep->failed)
        return TMX_ERR_PEER_FAILED;
    ui->super.quiet = 0;
    udp_gro_set(ui, 1); /* the data comes in bursts */
    return tl_emu_get(&ui->emu, tep, dst, len, raddr, rkey, op);
}

tmx_status_t udp_put(tl_ep_t *tep, const void *src, size_t len, uint64_t raddr, uint64_t rkey,
                     uint64_t lkey, unsigned kind)
{
    udp_ep_t *ep = (udp_ep_t *)tep;
    udp_iface_t *ui = (udp_iface_t *)tl_ep_iface(tep);

    if (tl_put_kind_check(tl_ep_iface(tep), kind) != TMX_OK)
        return TMX_ERR_INVALID;
    if (ep->failed)
        return TMX_ERR_PEER_FAILED;
    if (len == 0)
        return TMX_OK;
    ui->super.quiet = 0;
    return tl_emu_put(&ui->emu, tep, src, len, raddr, rkey, lkey);
}

/* Written data: the layer above checks key, bounds and sender before a
 * byte lands. A part that its writer could no longer read (refused on
 * resending: the write ended) comes empty and is ignored. */
void udp_put_data_arrive(udp_iface_t *ui, udp_ep_t *ep, const udp_hdr_t *h, const unsigned char *p)
{
    uint64_t rkey = (uint64_t)h->frag_id | (uint64_t)le32toh(h->reserved) << 32;

    if (h->len == 0)
        return;
    if (ui->super.put_data(ui->super.recv_arg, ep->super.uuid, h->offset, rkey, p, h->len) != TMX_OK) {
        ui->stats.dropped++;
        if (!ui->closing && util_log_sparse(&ui->put_refused))
            util_warn("udp: written data of %u bytes from peer %016llx refused (%llu refused so far)", h->len,
                      (unsigned long long)ep->super.uuid, (unsigned long long)ui->put_refused);
        return;
    }
    /* a receive lent this sender its buffer: until its WDONE, a lost tail
     * is reported (udp_put_rx_check); data refused starts no such wait */
    if (!ep->put_rx) {
        ep->put_rx = 1;
        ep->flow->put_rx_us = ui->rx_now_us;
        ui->n_put_rx++;
        udp_gro_set(ui, 1); /* the rest comes in bursts, as a read's data */
    }
}

void udp_put_rx_end(udp_iface_t *ui, udp_ep_t *ep)
{
    if (ep->put_rx) {
        ep->put_rx = 0;
        ui->n_put_rx--;
    }
}

/* The writer's WDONE follows its data on the data channel: until it
 * comes, we wait for data as a reader does, and a lost tail (of the data
 * or the WDONE) is reported within UDP_STALL_US instead of waiting for
 * the writer's timeout. */
void udp_put_rx_check(udp_iface_t *ui, uint64_t now)
{
    /* a peer writing into us keeps its flow (udp_flow_settle) */
    for (udp_flow_t *fl = udp_flow_walk(ui, NULL); fl != NULL; fl = udp_flow_walk(ui, fl)) {
        if (fl->ep->put_rx)
            udp_rx_stall_check(ui, fl->ep, fl->put_rx_us, now, &fl->stall_sent_us);
    }
}

void udp_get_data_arrive(udp_iface_t *ui, udp_ep_t *ep, const udp_hdr_t *h, const unsigned char *p)
{
    tmx_status_t status = (tmx_status_t)(int32_t)le32toh(h->reserved);

    if (tl_emu_data_arrive(&ui->emu, &ep->super, h->frag_id, h->offset, status, p, h->len, ui->rx_now_us) != TMX_OK) {
        ui->stats.dropped++;
        if (!ui->closing && util_log_sparse(&ui->get_data_dropped)) /* closing: abandoned by iface_close */
            util_warn("udp: read data for unknown or finished read %u dropped (%llu so far)", h->frag_id,
                      (unsigned long long)ui->get_data_dropped);
    }
}

void udp_get_req_arrive(udp_iface_t *ui, udp_ep_t *ep, const unsigned char *p, size_t len)
{
    udp_get_req_t w;
    tl_emu_req_t r;

    if (len == sizeof(w)) {
        memcpy(&w, p, sizeof(w));
        r = (tl_emu_req_t){(uint32_t)le64toh(w.op_id), le64toh(w.raddr), le64toh(w.rkey), le64toh(w.len)};
        if (tl_emu_req_arrive(&ui->emu, &ep->super, &r) == TMX_OK)
            return;
    }
    ui->stats.dropped++;
    if (util_log_sparse(&ui->get_req_dropped))
        util_warn("udp: dropped a read request of %zu bytes from peer %016llx (%llu so far)", len,
                  (unsigned long long)ep->super.uuid, (unsigned long long)ui->get_req_dropped);
}
