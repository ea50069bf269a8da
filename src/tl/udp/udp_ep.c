/*
 * The udp transport's endpoints: one per peer context, made on first
 * contact in either direction (seed 002: state per peer is small until it
 * is used), found by a hash of the peer's identity, and ended by failure
 * or by the peer's goodbye.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tl/udp/udp.h"
#include "util/log.h"

/* ep_map holds the endpoints the layer above does not find for us, so
 * that a process costs one index entry, the layer above's, not two. An
 * endpoint leaves ep_map once the layer above finds it; it comes back
 * when the layer above lets go of it (udp_ep_destroy) or stops finding
 * it (udp_ep_unfound). An endpoint not in ep_map is always found there. */
static tmx_status_t ep_list(udp_iface_t *ui, udp_ep_t *ep)
{
    if (ep->listed)
        return TMX_OK;
    if (util_idmap_put(&ui->ep_map, ep) != 0) {
        util_error("udp: out of memory: the endpoint to %016llx cannot be indexed",
                   (unsigned long long)ep->super.uuid);
        return TMX_ERR_NOMEM;
    }
    ep->listed = 1;
    return TMX_OK;
}

static void ep_unlist(udp_iface_t *ui, udp_ep_t *ep)
{
    if (util_idmap_get(&ui->ep_map, ep->super.uuid) == ep)
        util_idmap_del(&ui->ep_map, ep->super.uuid);
    ep->listed = 0;
}

void udp_ep_free(udp_iface_t *ui, udp_ep_t *ep)
{
    udp_conn_t *c = udp_ep_conn(ui, ep);

    udp_flow_free(ui, ep);
    if (ep->listed)
        ep_unlist(ui, ep);
    ui->n_eps--;
    udp_sock_ep_disconnect(ui, ep);
    if (c->refs == 1)
        util_debug("udp: node at %s:%u: round trip %u us (deviation %u us)", inet_ntoa(c->sa.sin_addr),
                   ntohs(c->sa.sin_port), c->srtt_us, c->rttvar_us);
    udp_conn_put(ui, c);
    util_pool_put(&ui->ep_pool, ep);
}

tmx_status_t udp_address(tl_iface_t *iface, void *buf, size_t *len)
{
    udp_iface_t *ui = (udp_iface_t *)iface;
    udp_addr_t a = {ui->sock.self_sa.sin_addr.s_addr, ui->sock.self_sa.sin_port, htons(ui->sock.index),
                    htole64(ui->job_key)};

    return tl_address_put(buf, len, &a, sizeof(a));
}

tmx_status_t udp_reachable(tl_iface_t *iface, const void *addr, size_t len)
{
    udp_iface_t *ui = (udp_iface_t *)iface;
    udp_addr_t a;

    if (len != sizeof(a))
        return TMX_ERR_INVALID;
    memcpy(&a, addr, sizeof(a));
    return le64toh(a.job_key) == ui->job_key ? TMX_OK : TMX_ERR_UNREACHABLE;
}

/* ------------------------------------------------------------ endpoints */

/* Once per datagram: a hash lookup (the layer above's, or ep_map's), not
 * a scan of every peer. unlist: an endpoint the layer above finds leaves
 * ep_map (not while ep_map is walked). */
static udp_ep_t *ep_find(udp_iface_t *ui, uint64_t uuid, int unlist)
{
    udp_ep_t *ep;

    if (ui->super.held != NULL &&
        (ep = (udp_ep_t *)ui->super.held->find(ui->super.recv_arg, &ui->super, uuid)) != NULL) {
        if (unlist && ep->listed)
            ep_unlist(ui, ep);
        return ep;
    }
    return util_idmap_get(&ui->ep_map, uuid);
}

udp_ep_t *udp_ep_find(udp_iface_t *ui, uint64_t uuid)
{
    return ep_find(ui, uuid, 0);
}

udp_ep_t *udp_ep_find_rx(udp_iface_t *ui, uint64_t uuid)
{
    return ep_find(ui, uuid, 1);
}

tmx_status_t udp_ep_unfound(tl_ep_t *tep)
{
    return ep_list((udp_iface_t *)tl_ep_iface(tep), (udp_ep_t *)tep);
}

void udp_ep_list_all(udp_iface_t *ui)
{
    tl_ep_t *ep;

    if (ui->super.held == NULL)
        return;
    for (uint32_t it = 0; (ep = ui->super.held->next(ui->super.recv_arg, &ui->super, &it)) != NULL;)
        (void)ep_list(ui, (udp_ep_t *)ep); /* logged; freed at close or lost */
}


/* Per-peer state is made on first contact either way (seed 002), and is
 * small while the peer is idle: its flow (windows, timers, ACK state) is
 * made by the first segment either way and freed when the exchange is
 * over (udp_flow_settle). */
udp_ep_t *udp_ep_new(udp_iface_t *ui, uint64_t uuid, const struct sockaddr_in *sa, uint16_t index)
{
    udp_ep_t *ep = util_pool_get(&ui->ep_pool);
    udp_conn_t *c;

    if (ep == NULL)
        return NULL;
    memset(ep, 0, sizeof(*ep));
    ep->super.uuid = uuid;
    if ((c = udp_conn_get(ui, sa)) == NULL) {
        util_pool_put(&ui->ep_pool, ep);
        return NULL;
    }
    ep->conn = c->id;
    if (util_idmap_put(&ui->ep_map, ep) != 0) {
        udp_conn_put(ui, c);
        util_pool_put(&ui->ep_pool, ep);
        return NULL;
    }
    ep->listed = 1;
    tl_ep_init(&ep->super, &ui->super, uuid, TMX_PEER_NONE);
    ep->index = index;
    udp_ep_heard(ep, udp_now_us());
    ui->n_eps++;
    return ep;
}

/* A stranger: an endpoint the layer above neither made nor knows the
 * process of (no address given for it): made by whatever wrote to our
 * port under that identity. */
static int stranger(udp_iface_t *ui, const udp_ep_t *ep)
{
    const void *addr;
    size_t len;

    return !ep->connected && ep->super.kind == TL_EP_NONE &&
           (ui->super.peer_addr == NULL ||
            ui->super.peer_addr(ui->super.recv_arg, &ui->super, ep->super.uuid, &addr, &len) != TMX_OK);
}

/* ep goes with what it holds (pieces of packets, refusals of its reads,
 * a write's wait), as with a failure, but nobody is told. */
static void ep_forget(udp_iface_t *ui, udp_ep_t *ep)
{
    udp_put_rx_end(ui, ep);
    if (ep->rx_left) {
        ep->rx_left = 0;
        ui->n_left--;
    }
    udp_rx_reasm_drop(ui, ep);
    tl_emu_ep_fail(&ui->emu, &ep->super);
    udp_faults_forget(&ui->faults, ep);
    udp_ep_free(ui, ep);
}

int udp_ep_evict_stranger(udp_iface_t *ui)
{
    for (int k = 0; k < UDP_EVICT_LOOK; k++) { /* strangers are all in ep_map */
        udp_ep_t *ep = util_idmap_next(&ui->ep_map, &ui->evict_it);

        if (ep == NULL && (ui->evict_it = 0, ep = util_idmap_next(&ui->ep_map, &ui->evict_it)) == NULL)
            return 0;
        if (!stranger(ui, ep))
            continue;
        if (util_log_sparse(&ui->evicted))
            util_info("udp: %u peers known, the most: %llu strangers forgotten so far to make room (the "
                      "last %016llx)", ui->n_eps, (unsigned long long)ui->evicted,
                      (unsigned long long)ep->super.uuid);
        ep_forget(ui, ep);
        return 1;
    }
    return 0;
}

/* An endpoint that datagrams alone made, before the layer above had an
 * address for its process, at another host than the one the address
 * names: a process writes from the host it publishes (every socket of it
 * is bound to that address), so those datagrams were another's. It is
 * forgotten whatever they left in it (a flow, its sequence numbers moved
 * on, a failure by a bye): kept, the process's first packets would be
 * taken for old duplicates of the forger's, or the process for gone.
 * Not while a datagram of its own is being handled (an upcall). */
static int ep_forged(const udp_iface_t *ui, const udp_ep_t *ep, const struct sockaddr_in *sa)
{
    return !ep->connected && ep->super.kind == TL_EP_NONE && ep != ui->rx_ep &&
           udp_ep_conn(ui, ep)->sa.sin_addr.s_addr != sa->sin_addr.s_addr;
}

tmx_status_t udp_ep_create(tl_iface_t *iface, const void *addr, size_t len, tmx_peer_t peer,
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
    if (ep != NULL && ep_forged(ui, ep, &sa)) {
        util_warn("udp: datagrams naming %016llx came from %s, not from the host its address names: forgotten",
                  (unsigned long long)uuid, inet_ntoa(udp_ep_conn(ui, ep)->sa.sin_addr));
        ep_forget(ui, ep);
        ep = NULL;
    }
    if (ep == NULL && (ep = udp_ep_new(ui, uuid, &sa, ntohs(a.index))) == NULL)
        return TMX_ERR_NOMEM;
    if (ep->failed)
        return TMX_ERR_PEER_FAILED;
    ep->index = ntohs(a.index);
    /* the address published is the one that counts */
    if (udp_ep_move(ui, ep, &sa) != 0)
        return TMX_ERR_NOMEM;
    tl_ep_init(&ep->super, iface, uuid, peer);
    ep->connected = 1;
    udp_sock_ep_connect(ui, ep);
    *out = &ep->super;
    return TMX_OK;
}

/* All processes of a node share its port (docs/udp.md), and every
 * datagram of a process leaves from its host and names that port for
 * replies: an address its packet carries must name both, else it would
 * make us send to a third party (reflection). Another process of the same
 * node can still name its node-mates' indexes, which reach nobody else.
 * The endpoint is the one whose datagram is being handled (the packet's);
 * a process we have none for did not write through us: nothing to judge. */
tmx_status_t udp_sender_check(tl_iface_t *iface, uint64_t uuid, const void *addr, size_t len)
{
    udp_iface_t *ui = (udp_iface_t *)iface;
    udp_ep_t *ep = ui->rx_ep != NULL && ui->rx_ep->super.uuid == uuid ? ui->rx_ep : udp_ep_find(ui, uuid);
    const struct sockaddr_in *sa;
    char named[INET_ADDRSTRLEN];
    udp_addr_t a;

    if (len != sizeof(a))
        return TMX_ERR_INVALID;
    if (ep == NULL)
        return TMX_OK;
    memcpy(&a, addr, sizeof(a));
    sa = &udp_ep_conn(ui, ep)->sa;
    if (a.ip == sa->sin_addr.s_addr && a.port == sa->sin_port)
        return TMX_OK;
    if (util_log_sparse(&ui->addr_refused)) {
        inet_ntop(AF_INET, &a.ip, named, sizeof(named));
        util_warn("udp: %016llx announced the address %s:%u, but its datagrams come from %s:%u: refused "
                  "(%llu so far)", (unsigned long long)uuid, named, ntohs(a.port),
                  inet_ntoa(sa->sin_addr), ntohs(sa->sin_port), (unsigned long long)ui->addr_refused);
    }
    return TMX_ERR_INVALID;
}

/* The endpoint stays until the interface closes: the peer may still be
 * owed ACKs or retransmissions. */
void udp_ep_destroy(tl_ep_t *tep)
{
    ((udp_ep_t *)tep)->connected = 0;
    (void)ep_list((udp_iface_t *)tl_ep_iface(tep), (udp_ep_t *)tep); /* logged; lost at close */
}

static void ep_end(udp_iface_t *ui, udp_ep_t *ep, int clean)
{
    ep->failed = 1;
    udp_put_rx_end(ui, ep);
    udp_sock_ep_disconnect(ui, ep); /* nothing more goes to it: the descriptor is for the next peer */
    tl_emu_ep_fail(&ui->emu, &ep->super);
    udp_flow_empty(ui, ep); /* nothing more comes from it or goes to it */
    ui->super.fail_cb(ui->super.fail_arg, ep->super.uuid, clean);
}

void udp_ep_fail(udp_iface_t *ui, udp_ep_t *ep, const char *why)
{
    const struct sockaddr_in *sa = &udp_ep_conn(ui, ep)->sa;

    if (ep->failed)
        return;
    util_warn("udp: peer %016llx at %s:%u failed: %s", (unsigned long long)ep->super.uuid, inet_ntoa(sa->sin_addr),
              ntohs(sa->sin_port), why);
    ep_end(ui, ep, 0);
}

void udp_ep_gone(udp_iface_t *ui, udp_ep_t *ep)
{
    const struct sockaddr_in *sa = &udp_ep_conn(ui, ep)->sa;

    if (ep->failed)
        return;
    util_debug("udp: peer %016llx at %s:%u closed its context", (unsigned long long)ep->super.uuid,
               inet_ntoa(sa->sin_addr), ntohs(sa->sin_port));
    ep_end(ui, ep, 1);
}

/* A clean exit, told to every peer we talked with, so that its port's
 * refusal afterwards is not taken for a death (udp_live.c). One datagram,
 * not acknowledged: if it is lost, the refusal decides. */
void udp_bye_all(udp_iface_t *ui)
{
    udp_ep_t *ep;

    for (uint32_t it = 0; (ep = udp_ep_next(ui, &it)) != NULL;) {
        if (!ep->failed && (ep->rx_data_seen || udp_ep_next_seq(ep, UDP_CH_DATA) != 0 ||
                            udp_ep_next_seq(ep, UDP_CH_PRIO) != 0))
            udp_bye_send(ui, ep);
    }
}
