/*
 * Remote reads over udp (seed 001's "RDMA emulation", turned from a PUT
 * into a GET): the reader sends a request on the priority channel; the
 * owner checks the key and bounds with the layer above and streams the
 * bytes on the data channel, reliably and within the window; the reader
 * copies each segment straight into the user buffer and completes the read
 * when every byte is in.
 */
#include <stdlib.h>
#include <string.h>

#include "tl/udp/udp.h"
#include "util/log.h"

#define UDP_SERVE_SEGS 32 /* segments per send: one GSO batch */

typedef struct udp_get_op {
    util_dlist_t link;
    uint32_t id;
    udp_ep_t *ep;
    unsigned char *dst;
    uint64_t len;
    uint64_t received;
    udp_get_req_t req;   /* wire order, for (re)sending */
    int req_sent;
    uint64_t start_us;   /* when the request went out */
    tl_get_op_t *op;
} udp_get_op_t;

typedef struct udp_serve {
    util_dlist_t link;
    udp_ep_t *ep;
    uint32_t id;
    uint64_t raddr;
    uint64_t rkey;
    uint64_t len;
    uint64_t offset;
    tmx_status_t status;
} udp_serve_t;

static int get_req_push(udp_iface_t *ui, udp_get_op_t *g)
{
    struct iovec iov = {&g->req, sizeof(g->req)};

    if (udp_send_segs(ui, g->ep, UDP_CH_PRIO, UDP_FLAG_GET_REQ, 0, 0, 0, &iov, 1, sizeof(g->req), 0) != TMX_OK)
        return 0;
    g->req_sent = 1;
    g->start_us = udp_now_us();
    return 1;
}

tmx_status_t udp_get(tl_ep_t *tep, void *dst, size_t len, uint64_t raddr, uint64_t rkey,
                     unsigned kind, tl_get_op_t *op)
{
    udp_ep_t *ep = (udp_ep_t *)tep;
    udp_iface_t *ui = (udp_iface_t *)tep->iface;
    udp_get_op_t *g;

    if (tl_get_kind_check(tep->iface, kind) != TMX_OK)
        return TMX_ERR_INVALID;
    if (ep->failed)
        return TMX_ERR_PEER_FAILED;
    if (len == 0)
        return TMX_OK;
    if ((g = calloc(1, sizeof(*g))) == NULL)
        return TMX_ERR_NOMEM;
    ui->super.quiet = 0;
    g->id = ++ui->next_get_id;
    g->ep = ep;
    g->dst = dst;
    g->len = len;
    g->op = op;
    g->req = (udp_get_req_t){htole64(g->id), htole64(raddr), htole64(rkey), htole64(len)};
    util_dlist_push_tail(&ui->gets, &g->link);
    udp_gro_set(ui, 1); /* the data comes in bursts */
    get_req_push(ui, g);
    return TMX_INPROGRESS;
}

static udp_get_op_t *get_find(udp_iface_t *ui, udp_ep_t *ep, uint32_t id)
{
    util_dlist_t *pos;

    util_dlist_foreach(pos, &ui->gets) {
        udp_get_op_t *g = util_container_of(pos, udp_get_op_t, link);
        if (g->id == id && g->ep == ep)
            return g;
    }
    return NULL;
}

static void get_finish(udp_get_op_t *g, tmx_status_t st)
{
    util_dlist_unlink(&g->link);
    g->op->done(g->op, st);
    free(g);
}

/* reserved carries the owner's status: non-zero means it refused. */
void udp_get_data_arrive(udp_iface_t *ui, udp_ep_t *ep, const udp_hdr_t *h, const unsigned char *p)
{
    udp_get_op_t *g = get_find(ui, ep, h->frag_id);
    int32_t status = (int32_t)le32toh(h->reserved);

    if (g == NULL || h->offset > g->len || h->len > g->len - h->offset) {
        ui->dropped++;
        if (!ui->closing) /* else the read was abandoned by iface_close */
            util_warn("udp: read data for unknown or finished read %u dropped", h->frag_id);
        return;
    }
    if (status != TMX_OK) {
        util_error("udp: peer %u refused a read of %llu bytes: %s", ep->super.peer,
                   (unsigned long long)g->len, tmx_strerror((tmx_status_t)status));
        get_finish(g, (tmx_status_t)status);
        return;
    }
    memcpy(g->dst + h->offset, p, h->len);
    g->received += h->len;
    if (g->received == g->len)
        get_finish(g, TMX_OK);
}

void udp_get_req_arrive(udp_iface_t *ui, udp_ep_t *ep, const unsigned char *p, size_t len)
{
    udp_get_req_t r;
    udp_serve_t *s;

    if (len != sizeof(r) || (s = calloc(1, sizeof(*s))) == NULL) {
        ui->dropped++;
        util_warn("udp: dropped a read request of %zu bytes", len);
        return;
    }
    memcpy(&r, p, sizeof(r));
    s->ep = ep;
    s->id = (uint32_t)le64toh(r.op_id);
    s->raddr = le64toh(r.raddr);
    s->rkey = le64toh(r.rkey);
    s->len = le64toh(r.len);
    s->status = ui->super.mem_check(ui->super.recv_arg, s->raddr, s->len, s->rkey);
    util_dlist_push_tail(&ui->serves, &s->link);
}

/* Streams what the window takes; 1 when the whole read is on its way. The
 * status travels in the header's reserved word (see udp_wire.h). */
static int serve_push(udp_iface_t *ui, udp_serve_t *s)
{
    size_t per = (ui->mtu - sizeof(udp_hdr_t)) * UDP_SERVE_SEGS;

    do {
        uint64_t left = s->len - s->offset;
        size_t n = s->status != TMX_OK ? 0 : (left < per ? (size_t)left : per);
        struct iovec iov;
        tmx_status_t st;

        /* the memory is lent only while the owner's send lasts: asked
         * again for every chunk, so that a send failed meanwhile ends the
         * read with one refusal instead of a refusal per segment */
        if (n > 0 && (st = ui->super.mem_check(ui->super.recv_arg, s->raddr + s->offset, n, s->rkey)) != TMX_OK) {
            s->status = st;
            n = 0;
        }
        iov = (struct iovec){(void *)(uintptr_t)(s->raddr + s->offset), n};
        st = udp_send_segs(ui, s->ep, UDP_CH_DATA, UDP_FLAG_GET_DATA, s->id, s->offset,
                                        (uint32_t)s->status, &iov, 1, n, s->rkey);
        if (st == TMX_ERR_AGAIN)
            return 0;
        if (st != TMX_OK)
            return 1;
        s->offset += n;
    } while (s->status == TMX_OK && s->offset < s->len);
    return 1;
}

int udp_get_progress(udp_iface_t *ui, uint64_t now)
{
    util_dlist_t *pos, *tmp;
    int events = 0;

    util_dlist_foreach_safe(pos, tmp, &ui->serves) {
        udp_serve_t *s = util_container_of(pos, udp_serve_t, link);
        if (s->ep->failed || serve_push(ui, s)) {
            util_dlist_unlink(&s->link);
            free(s);
            events++;
        }
    }
    util_dlist_foreach(pos, &ui->gets) {
        udp_get_op_t *g = util_container_of(pos, udp_get_op_t, link);
        if (!g->req_sent)
            events += get_req_push(ui, g);
        else
            udp_rx_stall_check(ui, g->ep, g->start_us, now);
    }
    return events;
}

void udp_get_fail_ep(udp_iface_t *ui, udp_ep_t *ep)
{
    util_dlist_t *pos, *tmp;

    util_dlist_foreach_safe(pos, tmp, &ui->gets) {
        udp_get_op_t *g = util_container_of(pos, udp_get_op_t, link);
        if (g->ep == ep)
            get_finish(g, TMX_ERR_PEER_FAILED);
    }
}

void udp_get_fini(udp_iface_t *ui)
{
    util_dlist_t *pos, *tmp;

    util_dlist_foreach_safe(pos, tmp, &ui->gets) {
        free(util_container_of(pos, udp_get_op_t, link));
    }
    util_dlist_foreach_safe(pos, tmp, &ui->serves) {
        free(util_container_of(pos, udp_serve_t, link));
    }
    util_dlist_init(&ui->gets);
    util_dlist_init(&ui->serves);
}
