/*
 * The udp transport: reliable, ordered delivery per peer over unreliable
 * datagrams, after seed 001 (Open MPI's usNIC BTL). A file per concern:
 *   udp.c        the interface: open, close, progress, wait, the ops table
 *   udp_sock.c   sockets, GRO and GSO, batched reads
 *   udp_node.c   one port per node: the kernel steers by node index
 *   udp_ep.c     endpoints: made, found, failed, said goodbye to
 *   udp_tx.c     segmentation and sending
 *   udp_rx.c     checking and dispatching what arrives
 *   udp_rel.c    sequence numbers, ACKs, retransmission (reliability)
 *   udp_live.c   peer liveness: keepalives, refusals, goodbyes
 *   udp_get.c    the remote read (tl_emu.h over udp)
 *   udp_fault.c  fault injection for tests
 */
#include <arpa/inet.h>
#include <assert.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>

#include "tl/udp/udp.h"
#include "util/log.h"

#define UDP_EAGER_LIMIT (32 * 1024)
static_assert(UDP_EAGER_LIMIT >= TMX_INJECT_MAX, "injected sends go eagerly");
#define UDP_LINGER_US 1000000
#define UDP_HOT_POLLS 100000    /* after a datagram, poll the socket every time */
#define UDP_GRO_IDLE_US 100000  /* GRO goes off this long after the last read */
#define UDP_MIN_MTU (UDP_PRIO_MTU + 28) /* TMX_UDP_MTU: a priority datagram fits */

uint64_t udp_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void settings_apply(udp_iface_t *ui, uint32_t ifmtu)
{
    uint64_t mtu = ui->cfg.set.mtu;

    ui->cfg.window = ui->cfg.set.window;
    if (ui->cfg.window & (ui->cfg.window - 1)) { /* slots are seq & (window - 1) */
        uint32_t w = 1u << (31 - __builtin_clz(ui->cfg.window));
        util_info("udp: TMX_UDP_WINDOW %u is not a power of two: using %u", ui->cfg.window, w);
        ui->cfg.window = w;
    }
    ui->cfg.ack_delay_us = ui->cfg.set.ack_delay_us;
    ui->cfg.rto_us = ui->cfg.set.rto_ms * 1000;
    ui->cfg.peer_timeout_us = ui->cfg.set.peer_timeout_ms * 1000;
    ui->cfg.conn_max = ui->cfg.set.connect_max;
    if (mtu == 0) {
        mtu = ifmtu;
    } else if (mtu < UDP_MIN_MTU) {
        util_warn("udp: TMX_UDP_MTU %llu is below the minimum: using %d", (unsigned long long)mtu, UDP_MIN_MTU);
        mtu = UDP_MIN_MTU;
    }
    mtu = mtu > 28 ? mtu - 28 : 576; /* IPv4 and UDP headers */
    if (mtu > UDP_MAX_DGRAM)
        mtu = UDP_MAX_DGRAM;
    if (mtu < UDP_PRIO_MTU)
        mtu = UDP_PRIO_MTU;
    ui->cfg.mtu = (uint32_t)mtu;
    /* a packet is sent whole or not at all (udp_send_segs): the window
     * takes the largest one, or its sender would wait for ever */
    {
        uint64_t need = (UDP_MAX_PACKET + (mtu - sizeof(udp_hdr_t)) - 1) / (mtu - sizeof(udp_hdr_t)), w = 1;
        while (w < need)
            w *= 2;
        if (ui->cfg.window < w) {
            util_info("udp: TMX_UDP_WINDOW %u cannot hold a packet of %d bytes in datagrams of %llu: using %llu",
                      ui->cfg.window, UDP_MAX_PACKET, (unsigned long long)mtu, (unsigned long long)w);
            ui->cfg.window = (uint32_t)w;
        }
    }
}

static tmx_status_t udp_iface_open(const tl_iface_params_t *params, tl_iface_t **out)
{
    udp_iface_t *ui = calloc(1, sizeof(*ui));
    uint32_t ifmtu;
    tmx_status_t st;

    if (ui == NULL)
        return TMX_ERR_NOMEM;
    ui->super.ops = &tl_udp_ops;
    ui->super.recv_cb = params->recv_cb;
    ui->super.fail_cb = params->fail_cb;
    ui->super.fail_arg = params->fail_arg;
    ui->super.get_kinds = TL_GET_COPY;
    ui->super.put_kinds = TL_PUT_COPY;
    ui->super.put_checked = 1;
    tl_put_cbs_set(&ui->super, params);
    ui->super.mem_check = params->mem_check;
    ui->super.admit_cb = params->admit_cb;
    ui->super.peer_addr = params->peer_addr;
    ui->super.held = params->held;
    ui->super.recv_arg = params->recv_arg;
    ui->super.eager_limit = UDP_EAGER_LIMIT;
    ui->super.max_packet = UDP_MAX_PACKET;
    ui->super.get_checked = 1;
    ui->uuid = params->uuid;
    ui->job_key = params->job_key;
    ui->cfg.set = params->settings->udp;
    ui->in_job = params->in_job;
    util_idmap_init(&ui->ep_map, offsetof(udp_ep_t, super.uuid));
    /* 8-byte aligned at least: the core keeps flags in a pointer's low bits */
    util_pool_init_align(&ui->ep_pool, sizeof(udp_ep_t), 16, _Alignof(udp_ep_t) > 8 ? _Alignof(udp_ep_t) : 8);
    util_dlist_init(&ui->acks);
    util_dlist_init(&ui->flows);
    util_wheel_init(&ui->wheel, UDP_TICK_US, udp_now_us());
    udp_faults_init(&ui->faults, &ui->cfg.set.faults, params->uuid);
    if ((st = tl_iface_register(&ui->super)) != TMX_OK) {
        udp_faults_fini(&ui->faults);
        free(ui);
        return st;
    }
    if ((st = udp_sock_open(ui, &ifmtu)) != TMX_OK) {
        tl_iface_unregister(&ui->super);
        udp_faults_fini(&ui->faults);
        free(ui);
        return st;
    }
    settings_apply(ui, ifmtu);
    udp_get_init(ui);
    ui->poll_now_us = udp_now_us();
    ui->wait_cap_us = 1000;
    ui->seg_cap = ui->cfg.mtu;
    util_pool_init(&ui->segs, sizeof(udp_seg_t) + ui->seg_cap, 64);
    util_pool_init(&ui->hsegs, sizeof(udp_seg_t) + sizeof(udp_hdr_t), 256);
    /* What a burst to many peers took (segments in flight to each) is
     * given back once every segment is acknowledged: beyond twice about
     * 256 KiB (and 4 chunks of headers), at once; down to one chunk of
     * each (about 92 KiB and 36 KiB at an MTU of 1500) when the last flow
     * ends (udp_flow_free), so that what an idle process holds does not
     * depend on how many peers its last burst reached, while a stream of
     * large messages does not give back and take again a chunk each. */
    util_pool_set_keep(&ui->segs, 1 + (256u << 10) / (64 * (sizeof(udp_seg_t) + ui->seg_cap)));
    util_pool_set_keep(&ui->hsegs, 4);
    util_info("udp: %s:%u, datagrams of %u bytes, window %u", inet_ntoa(ui->sock.self_sa.sin_addr),
              ntohs(ui->sock.self_sa.sin_port), ui->cfg.mtu, ui->cfg.window);
    *out = &ui->super;
    return TMX_OK;
}

static int tx_idle(udp_iface_t *ui)
{
    for (udp_flow_t *fl = udp_flow_walk(ui, NULL); fl != NULL; fl = udp_flow_walk(ui, fl)) {
        for (int ch = 0; ch < UDP_N_CH && !fl->ep->failed; ch++) {
            if (fl->tx[ch].una != fl->tx[ch].next_seq)
                return 0;
        }
    }
    return 1;
}

static int udp_progress(tl_iface_t *iface);

/* Our last segments (a FIN, say) may still need retransmitting for a peer
 * to finish: keep the transport going a little while they are unacked. */
static void linger(udp_iface_t *ui)
{
    uint64_t end = udp_now_us() + UDP_LINGER_US;

    while (!tx_idle(ui) && udp_now_us() < end) {
        struct pollfd pfd = {ui->sock.fd, POLLIN, 0};
        udp_progress(&ui->super);
        poll(&pfd, 1, 1);
    }
}

static void udp_iface_close(tl_iface_t *iface)
{
    udp_iface_t *ui = (udp_iface_t *)iface;

    /* reads are abandoned before lingering: their data, arriving now,
     * finds no read and is dropped, and no callback runs */
    tl_emu_abandon(&ui->emu);
    ui->closing = 1;
    linger(ui);
    udp_ack_flush(ui, UINT64_MAX);
    udp_bye_all(ui);
    util_info("udp: %llu segments sent, %llu resent, %llu probes, %llu timeouts, %llu stalls reported; "
              "%llu datagrams received, %llu dropped (%llu for other processes of the node)",
              (unsigned long long)ui->stats.segs_sent,
              (unsigned long long)ui->stats.retransmits, (unsigned long long)ui->stats.probes,
              (unsigned long long)ui->stats.timeouts,
              (unsigned long long)ui->stats.stalls_sent, (unsigned long long)ui->stats.dgrams_in,
              (unsigned long long)ui->stats.dropped, (unsigned long long)ui->stats.misrouted);
    tl_emu_abandon(&ui->emu); /* refusals of reads asked meanwhile */
    udp_ep_list_all(ui); /* the layer above let go of its endpoints, or should have */
    /* a free moves later values back, maybe behind the walk: walk again */
    while (ui->ep_map.n != 0) {
        udp_ep_t *ep;
        for (uint32_t it = 0; (ep = util_idmap_next(&ui->ep_map, &it)) != NULL;) {
            udp_ep_free(ui, ep);
            it--; /* a value moved back into the slot just freed */
        }
    }
    if (ui->n_eps != 0)
        util_error("udp: %u endpoints could not be indexed, and are lost", ui->n_eps);
    util_idmap_fini(&ui->ep_map);
    util_pool_fini(&ui->ep_pool);
    udp_faults_fini(&ui->faults);
    util_pool_fini(&ui->segs);
    util_pool_fini(&ui->hsegs);
    free(ui->gather);
    udp_sock_close(ui);
    tl_iface_unregister(iface);
    free(ui);
}

/* A receive costs a system call, and reading the clock is not free
 * either (tens of ns in a VM). While udp carries nothing (peers on this
 * host talk over shm) and has nothing pending, it tells the core it is
 * quiet, and is polled only every TL_QUIET_LOOK_US (tl.h), so that
 * udp's presence does not slow the shm fast path; once a datagram
 * arrives, every poll looks, for the next UDP_HOT_POLLS polls. */
static int udp_idle(const udp_iface_t *ui)
{
    if (ui->hot_polls != 0 || __atomic_load_n(&ui->woken, __ATOMIC_RELAXED))
        return 0;
    /* without peers there are no timers, ACKs, reads or held datagrams */
    return ui->n_eps == 0 ||
           (ui->wheel.n_armed == 0 && util_dlist_empty(&ui->acks) && !tl_emu_busy(&ui->emu) &&
            ui->n_put_rx == 0 && ui->faults.held == NULL);
}

/* The longest a wait may sleep for what is pending now: ACKs and
 * retransmissions fall due while asleep, so wake for the earliest, to
 * the wheel's tick while a retransmit timer runs or a read waits, else
 * every millisecond. Computed under the lock by each progress, for
 * udp_wait, which may not look at that state itself (tl.h, "Threads"). */
static void wait_cap_update(udp_iface_t *ui)
{
    int64_t cap = ui->wheel.n_armed > 0 || tl_emu_busy(&ui->emu) || ui->n_put_rx != 0 ? UDP_TICK_US : 1000;

    if ((!util_dlist_empty(&ui->acks) || ui->faults.held != NULL) && (int64_t)ui->cfg.ack_delay_us < cap)
        cap = (int64_t)ui->cfg.ack_delay_us;
    __atomic_store_n(&ui->wait_cap_us, cap, __ATOMIC_RELAXED);
}

static int udp_progress(tl_iface_t *iface)
{
    udp_iface_t *ui = (udp_iface_t *)iface;
    uint64_t now;
    int events = 0, n;

    if (__atomic_load_n(&ui->woken, __ATOMIC_RELAXED)) {
        __atomic_store_n(&ui->woken, 0, __ATOMIC_RELAXED);
        ui->hot_polls = UDP_HOT_POLLS;
        if (__atomic_exchange_n(&ui->errq_woken, 0, __ATOMIC_RELAXED))
            ui->sock.errq = 1;
    }
    if (ui->hot_polls > 0)
        ui->hot_polls--;
    /* a batch short of full emptied the socket: another call would only
     * cost a system call before the caller sees what arrived */
    do {
        n = udp_sock_recv(ui);
        events += n;
    } while (n == UDP_RECV_BATCH && events < 4 * UDP_RECV_BATCH);
    /* timers run in UDP_TICK_US ticks: an empty poll need not read the
     * clock each time */
    if (events > 0) {
        ui->hot_polls = UDP_HOT_POLLS;
        now = ui->poll_now_us = ui->rx_now_us;
    } else if ((++ui->clock_polls & (UDP_CLOCK_POLL_EVERY - 1)) == 0 ||
               __atomic_exchange_n(&ui->slept, 0, __ATOMIC_RELAXED)) {
        now = ui->poll_now_us = udp_now_us(); /* after a sleep, timers are due */
    } else {
        now = ui->poll_now_us;
    }
    if (tl_emu_busy(&ui->emu))
        events += tl_emu_progress(&ui->emu, now);
    if (ui->n_put_rx != 0)
        udp_put_rx_check(ui, now);
    if (ui->sock.gro_on) {
        if (!util_dlist_empty(&ui->emu.gets) || ui->n_put_rx != 0)
            ui->sock.gro_used_us = now;
        else if (now > ui->sock.gro_used_us + UDP_GRO_IDLE_US)
            udp_gro_set(ui, 0);
    }
    if (ui->wheel.n_armed > 0)
        events += util_wheel_expire(&ui->wheel, now);
    if (ui->n_left != 0 && !ui->super.rx_full)
        udp_rx_resume(ui);
    if (!util_dlist_empty(&ui->acks))
        udp_ack_flush(ui, now);
    if (ui->faults.held != NULL)
        udp_datagram_send(ui, NULL, NULL, 0);
    if (ui->sock.errq || ui->refusals || ui->byes)
        udp_live_progress(ui);
    if (ui->node.tab != NULL)
        udp_node_progress(ui, now);
    iface->quiet = udp_idle(ui);
    wait_cap_update(ui);
    return events;
}

/* What woke a sleep in the socket: the next progress reads it, and the
 * clock. */
static void udp_wait_done(tl_iface_t *iface, const struct pollfd *pfd)
{
    udp_iface_t *ui = (udp_iface_t *)iface;

    if (pfd->revents & (POLLIN | POLLERR)) {
        if (pfd->revents & POLLERR) /* a refusal queued (udp_live.c) */
            __atomic_store_n(&ui->errq_woken, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&ui->woken, 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&ui->slept, 1, __ATOMIC_RELAXED);
}

/* Datagrams make the socket readable on their own: nothing to announce.
 * The sleep ends by the next timer (wait_cap_us). */
static int udp_wait_arm(tl_iface_t *iface, struct pollfd *pfd, int64_t *cap_us)
{
    udp_iface_t *ui = (udp_iface_t *)iface;

    pfd->fd = ui->sock.fd;
    pfd->events = POLLIN;
    pfd->revents = 0;
    *cap_us = __atomic_load_n(&ui->wait_cap_us, __ATOMIC_RELAXED);
    return TL_WAIT_ARMED;
}

/* The kernel's receive work needs the CPU, so a waiter sleeps in poll
 * rather than spinning (blocking beats spinning across namespaces). Runs
 * unlocked, beside any other operation: it reads only the socket, fixed
 * from iface_open on, and writes only atomic flags. */
static void udp_wait(tl_iface_t *iface, int64_t timeout_us)
{
    struct pollfd pfd;
    int64_t t = timeout_us, cap;
    struct timespec ts;

    udp_wait_arm(iface, &pfd, &cap);
    if (t < 0 || t > cap)
        t = cap;
    ts.tv_sec = t / 1000000;
    ts.tv_nsec = (t % 1000000) * 1000;
    if (ppoll(&pfd, 1, &ts, NULL) <= 0)
        pfd.revents = 0;
    udp_wait_done(iface, &pfd);
}

/* Called while someone waits: keepalives to silent peers, and the
 * kernel's refusals read (udp_live.c). */
/* The peer's datagrams carry its soft bound (UDP_FLAG_PRESSURE). */
static int udp_peer_pressed(tl_ep_t *tep)
{
    return ((const udp_ep_t *)tep)->pressed;
}

static void udp_check_peers(tl_iface_t *iface)
{
    udp_live_check((udp_iface_t *)iface, udp_now_us());
}

const tl_ops_t tl_udp_ops = {
    .name = "udp",
    .iface_open = udp_iface_open,
    .iface_close = udp_iface_close,
    .address = udp_address,
    .reachable = udp_reachable,
    .ep_create = udp_ep_create,
    .ep_destroy = udp_ep_destroy,
    .ep_unfound = udp_ep_unfound,
    .send = udp_send,
    .get = udp_get,
    .put = udp_put,
    .progress = udp_progress,
    .wait = udp_wait,
    .wait_arm = udp_wait_arm,
    .wait_done = udp_wait_done,
    .check_peers = udp_check_peers,
    .peer_pressed = udp_peer_pressed,
    .sender_check = udp_sender_check,
    .sweep = udp_node_sweep,
};

