#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "boot/boot.h"
#include "core/config.h"
#include "core/core.h"
#include "proto/proto.h"
#include "util/hash.h"
#include "util/log.h"

#define TMX_API __attribute__((visibility("default")))
/* Requests and unexpected messages come from pools of chunks of this
 * many. The pools never give a chunk back before the context goes: a
 * handle the application uses after freeing it (a request freed twice, a
 * message already received) must still find mapped memory, so that it is
 * refused (TMX_ERR_INVALID) rather than read from memory given back. */
#define CORE_POOL_CHUNK 64
/* What an unexpected message costs beyond its record and payload: the
 * matcher's bin and hash slot when its tag is its own, malloc's header. */
#define CORE_UNEXP_INDEX_COST 96
/* Below the bound max, where senders are told to send rendezvous
 * (unexp_update): 8 MiB and an eighth of max before it, which covers
 * shm's ring and udp's windows of a few senders each, or half of a small
 * max. */
#define CORE_UNEXP_SLACK(max) ((size_t)(8u << 20) + (max) / 8 < (max) / 2 ? (size_t)(8u << 20) + (max) / 8 : (max) / 2)

static const uint64_t ctx_field_mask = TMX_CONTEXT_FIELD_THREAD_MODE | TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_SETTINGS |
                                       TMX_CONTEXT_FIELD_NAME | TMX_CONTEXT_FIELD_BOOT |
                                       TMX_CONTEXT_FIELD_OFFLOAD;

static uint64_t make_uuid(void)
{
    uint64_t r = 0;
    struct timespec ts;

    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r)) {
        clock_gettime(CLOCK_REALTIME, &ts);
        r = util_hash64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uintptr_t)&r);
    }
    r = util_hash64(r ^ ((uint64_t)getpid() << 32));
    return r != 0 ? r : 1; /* 0 means "nobody" (shm's sender slots) */
}

static tmx_status_t params_check(const tmx_context_params_t *p)
{
    if (p == NULL)
        return TMX_OK;
    if (p->field_mask & ~ctx_field_mask) {
        util_error("tmx_context_create: unknown field bits 0x%llx",
                   (unsigned long long)(p->field_mask & ~ctx_field_mask));
        return TMX_ERR_INVALID;
    }
    if ((p->field_mask & TMX_CONTEXT_FIELD_THREAD_MODE) && p->thread_mode != TMX_THREAD_SINGLE &&
        p->thread_mode != TMX_THREAD_MULTIPLE) {
        util_error("tmx_context_create: unknown thread mode %d", (int)p->thread_mode);
        return TMX_ERR_INVALID;
    }
    if ((p->field_mask & TMX_CONTEXT_FIELD_BOOT) && p->boot != TMX_BOOT_AUTO && p->boot != TMX_BOOT_NONE) {
        util_error("tmx_context_create: unknown boot mode %d", (int)p->boot);
        return TMX_ERR_INVALID;
    }
    if ((p->field_mask & TMX_CONTEXT_FIELD_OFFLOAD) && p->offload != 0 && p->offload != 1) {
        util_error("tmx_context_create: offload must be 0 or 1, not %d", p->offload);
        return TMX_ERR_INVALID;
    }
    if ((p->field_mask & TMX_CONTEXT_FIELD_TRANSPORTS) && p->transports == NULL) {
        util_error("tmx_context_create: transports field set to NULL");
        return TMX_ERR_INVALID;
    }
    return TMX_OK;
}

static tmx_status_t open_one(tmx_context_h ctx, const char *name)
{
    const tl_ops_t *ops = tl_find(name);
    tl_iface_params_t ip = {.uuid = ctx->uuid,
                            .job_key = boot_job_key(ctx->boot_join),
                            .recv_cb = proto_recv_cb,
                            .stream = &proto_stream_cb,
                            .recv_arg = &ctx->proto,
                            .admit_cb = proto_admit_cb,
                            .peer_addr = core_peer_addr_cb,
                            .held = &core_held,
                            .mem_check = proto_mem_check_cb,
                            .put_data = proto_put_data_cb,
                            .put_done = proto_put_done_cb,
                            .fail_cb = core_peer_failed_cb,
                            .fail_arg = ctx,
                            .mt = ctx->mt,
                            .wake_asym = ctx->asym,
                            .settings = &ctx->cfg.tl,
                            .in_job = ctx->boot_join};
    tmx_status_t st;

    if (ops == NULL) {
        util_error("unknown transport '%s'", name);
        return TMX_ERR_INVALID;
    }
    for (int i = 0; i < ctx->n_ifaces; i++) {
        if (ctx->ifaces[i]->ops == ops)
            return TMX_OK;
    }
    if (ctx->n_ifaces == CORE_MAX_TLS)
        return TMX_ERR_INVALID;
    st = ops->iface_open(&ip, &ctx->ifaces[ctx->n_ifaces]);
    if (st != TMX_OK) {
        util_error("cannot open transport %s: %s", name, tmx_strerror(st));
        return st;
    }
    if (ops == &tl_self_ops)
        ctx->self_iface = ctx->ifaces[ctx->n_ifaces];
    ctx->n_ifaces++;
    if ((st = proto_iface_add(&ctx->proto, ctx->ifaces[ctx->n_ifaces - 1])) != TMX_OK)
        return st;
    return TMX_OK;
}

/* A transport named explicitly must open; one opened only because it is
 * in the default list may be missing here (no network, say): it is then
 * skipped with a warning. */
static tmx_status_t open_transports(tmx_context_h ctx, const char *list, int strict)
{
    char buf[128];
    char *save = NULL;
    tmx_status_t st = TMX_OK;

    if (strlen(list) >= sizeof(buf)) {
        util_error("transport list '%s' too long", list);
        return TMX_ERR_INVALID;
    }
    strcpy(buf, list);
    for (char *tok = strtok_r(buf, ", ", &save); tok && st == TMX_OK; tok = strtok_r(NULL, ", ", &save)) {
        st = open_one(ctx, tok);
        if (st != TMX_OK && st != TMX_ERR_INVALID && !strict) {
            util_warn("transport %s unavailable (%s); going on without it", tok, tmx_strerror(st));
            st = TMX_OK;
        }
    }
    if (st == TMX_OK && ctx->n_ifaces == 0) {
        util_error("no transport in '%s'", list);
        st = TMX_ERR_INVALID;
    }
    return st;
}

/* ------------------------------------------------- what proto asks of core */

static void up_complete(void *arg, proto_req_t *req, tmx_status_t status)
{
    (void)arg;
    core_req_complete(util_container_of(req, struct tmx_request, p), status);
}

static proto_msg_t *up_msg_alloc(void *arg)
{
    struct tmx_message *msg = core_msg_alloc(arg);

    return msg != NULL ? &msg->p : NULL;
}

static void up_msg_kept(void *arg, proto_msg_t *msg, size_t bytes)
{
    core_unexp_charge(arg, util_container_of(msg, struct tmx_message, p), bytes);
}

static void up_msg_free(void *arg, proto_msg_t *msg)
{
    core_msg_free(arg, util_container_of(msg, struct tmx_message, p));
}

static tmx_status_t up_peer_ep(void *arg, tmx_peer_t peer, tl_ep_t **ep, proto_peer_t **pp)
{
    return core_peer_ready(arg, peer, ep, pp);
}

static tmx_peer_t up_peer_by_uuid(void *arg, uint64_t uuid)
{
    return core_peer_by_uuid(arg, uuid);
}

static tmx_status_t up_peer_add_implicit(void *arg, uint64_t uuid, const void *addr, size_t len,
                                         tmx_peer_t *out)
{
    return core_peer_add_implicit(arg, uuid, addr, len, out);
}

static tmx_status_t up_address(void *arg, void *buf, size_t room, size_t *used)
{
    return core_address(arg, buf, room, used);
}

static void context_free(tmx_context_h ctx)
{
    util_dlist_t *pos, *tmp;

    core_offload_stop(ctx);
    boot_job_leave(&ctx->job);
    /* Teardown runs in three steps (DESIGN.md): upcalls stop, transports
     * close, then the state above them goes. A transport may progress
     * while it closes (udp lingers for its last segments), and a FIN or
     * read request it reads then must not reach peers already freed. */
    for (int i = 0; i < ctx->n_ifaces; i++)
        tl_iface_mute(ctx->ifaces[i]);
    core_peers_close(ctx);
    for (int i = 0; i < ctx->n_ifaces; i++)
        ctx->ifaces[i]->ops->iface_close(ctx->ifaces[i]);
    util_dlist_foreach_safe(pos, tmp, &ctx->msgs) {
        proto_msg_clear(&util_container_of(pos, struct tmx_message, link)->p);
    }
    util_dlist_foreach_safe(pos, tmp, &ctx->reqs) {
        struct tmx_request *req = util_container_of(pos, struct tmx_request, link);
        if (req->owns_buf)
            free(req->p.buf); /* a copying synchronous send never matched */
    }
    proto_fini(&ctx->proto);
    core_peers_fini(ctx);
    util_pool_fini(&ctx->req_pool);
    util_pool_fini(&ctx->msg_pool);
    core_cq_fini(&ctx->cq);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

static void context_apply(tmx_context_h ctx, const tmx_context_params_t *p)
{
    const char *name = "tmx";

    if (p != NULL && (p->field_mask & TMX_CONTEXT_FIELD_THREAD_MODE))
        ctx->mt = p->thread_mode == TMX_THREAD_MULTIPLE;
    ctx->off_on = p != NULL && (p->field_mask & TMX_CONTEXT_FIELD_OFFLOAD) ? p->offload
                                                                          : ctx->cfg.offload;
    if (ctx->off_on) {
        core_offload_lock_mode(ctx, ctx->mt ? 2 : 1);
        ctx->mt = 1; /* the engine's thread and the application's share it */
    }
    if (p != NULL && (p->field_mask & TMX_CONTEXT_FIELD_NAME) && p->name != NULL)
        name = p->name;
    snprintf(ctx->name, sizeof(ctx->name), "%s", name);
}

/* Busy polling pays only while the process that will answer has a core of
 * its own. When the job has more ranks than this process may run on
 * cores, a rank that spins steals the time of the rank it waits for, so
 * it starts out yielding almost at once. Waits then adapt (core_idle). */
static unsigned spin_budget(tmx_context_h ctx)
{
    cpu_set_t set;
    int ncpu = 0;

    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        ncpu = CPU_COUNT(&set);
    if (boot_job_in(&ctx->job) && ncpu > 0 && ctx->job.size > (uint32_t)ncpu) {
        util_debug("%u ranks on %d cores: yielding when idle", ctx->job.size, ncpu);
        return CORE_SPIN_POLLS_SHARED;
    }
    return CORE_SPIN_POLLS;
}

TMX_API tmx_status_t tmx_context_create(const tmx_context_params_t *params, tmx_context_h *out)
{
    tmx_context_h ctx;
    const char *tls;
    tmx_status_t st;
    proto_upcalls_t up = {NULL, up_complete, up_msg_alloc, up_msg_kept, up_msg_free,
                          up_peer_ep, up_peer_by_uuid, up_peer_add_implicit, up_address};

    if (out == NULL) {
        util_error("tmx_context_create: NULL output handle");
        return TMX_ERR_INVALID;
    }
    if ((st = params_check(params)) != TMX_OK)
        return st;
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return TMX_ERR_NOMEM;
    st = config_load(&ctx->cfg, params && (params->field_mask & TMX_CONTEXT_FIELD_SETTINGS) ? params->settings
                                                                                            : NULL);
    if (st != TMX_OK) {
        free(ctx);
        return st;
    }
    util_log_level = ctx->cfg.log_level;
    pthread_mutex_init(&ctx->lock, NULL);
    context_apply(ctx, params);
    ctx->uuid = make_uuid();
    ctx->uuid_seed = make_uuid();
    ctx->self_peer = TMX_PEER_NONE;
    ctx->last_peer = TMX_PEER_NONE; /* the uuid cache starts empty */
    util_dlist_init(&ctx->reqs);
    util_dlist_init(&ctx->msgs);
    /* Handles point into these pools, and a stale handle must read as one
     * (TMX_ERR_INVALID) even after a burst's chunks were given back:
     * mapped pools keep the addresses and give the pages back, which then
     * read as zeros (ctx NULL). So a pool can go back to one chunk once no
     * object is in use (core_pools_trim, from progress): the high
     * water of a burst of requests is not held for ever. A chunk each from
     * the start: what a context holds does not depend on whether a
     * message ever came unexpected. */
    if (util_pool_init_mapped(&ctx->req_pool, sizeof(struct tmx_request), CORE_POOL_CHUNK) != 0 ||
        util_pool_init_mapped(&ctx->msg_pool, sizeof(struct tmx_message), CORE_POOL_CHUNK) != 0 ||
        util_pool_grow(&ctx->req_pool) != 0 || util_pool_grow(&ctx->msg_pool) != 0) {
        util_pool_fini(&ctx->req_pool);
        util_pool_fini(&ctx->msg_pool);
        pthread_mutex_destroy(&ctx->lock);
        free(ctx);
        return TMX_ERR_NOMEM;
    }
    up.arg = ctx;
    ctx->boot_join = !(params && (params->field_mask & TMX_CONTEXT_FIELD_BOOT) && params->boot == TMX_BOOT_NONE);
    ctx->cfg.proto.offload = ctx->off_on != 0;
    if ((st = proto_init(&ctx->proto, &up, &ctx->cfg.proto)) != TMX_OK)
        goto err_free;
    if (ctx->cfg.reg_cache != 0 && (st = proto_regcache_open(&ctx->proto, (size_t)ctx->cfg.reg_cache)) != TMX_OK)
        goto err_free;
    if (ctx->off_on) {
        off_caps_t caps = {.max_num_tags = (uint32_t)ctx->cfg.offload_tags,
                           .max_ops = (uint32_t)ctx->cfg.offload_ops};
        if ((st = proto_offload_open(&ctx->proto, &caps, (size_t)ctx->cfg.offload_min)) != TMX_OK)
            goto err_free;
        ctx->proto.offer_on = ctx->cfg.offload_offer != 0;
    }
    if ((st = core_cq_init(&ctx->cq)) != TMX_OK)
        goto err_free;
    tls = params && (params->field_mask & TMX_CONTEXT_FIELD_TRANSPORTS) ? params->transports
                                                                       : ctx->cfg.transports;
    if ((st = open_transports(ctx, tls, tls != ctx->cfg.transports || ctx->cfg.transports_set)) != TMX_OK)
        goto err_free;
    if (ctx->boot_join) {
        st = boot_job_join(ctx, &ctx->job);
        if (st != TMX_OK && st != TMX_ERR_NOT_FOUND)
            goto err_free;
    }
    ctx->spin_polls = spin_budget(ctx);
    ctx->unexp_max = (size_t)ctx->cfg.unexpected_max;
    if (ctx->off_on && (st = core_offload_start(ctx)) != TMX_OK)
        goto err_free;
    *out = ctx;
    return TMX_OK;

err_free:
    context_free(ctx);
    return st;
}

TMX_API tmx_status_t tmx_context_destroy(tmx_context_h ctx)
{
    if (ctx != NULL)
        context_free(ctx);
    return TMX_OK;
}

struct tmx_message *core_msg_alloc(tmx_context_h ctx)
{
    struct tmx_message *msg = util_pool_get(&ctx->msg_pool);

    if (msg == NULL)
        return NULL;
    memset(msg, 0, sizeof(*msg));
    msg->ctx = ctx;
    util_dlist_push_tail(&ctx->msgs, &msg->link);
    return msg;
}

/* Tells every transport when the bounds are reached or left again. Past
 * the soft bound, CORE_UNEXP_SLACK below TMX_UNEXPECTED_MAX, senders are
 * told to send every message with a payload above PROTO_PRESSED_EAGER_MAX
 * (and a completion to report) as rendezvous, whose header alone waits
 * here; at the bound itself the transports leave what no receive takes
 * where its sender put it. The slack holds what senders had under way
 * when they were told (shm: at most the ring; udp: the windows), so that
 * a message behind them that a posted receive takes is not held up by
 * payloads nobody asked for yet; only a sender that goes on sending eager
 * past the soft bound, or a flood of headers, meets the bound. */
static void unexp_update(tmx_context_h ctx)
{
    int soft = ctx->unexp_max != 0 && ctx->unexp_bytes >= ctx->unexp_max - CORE_UNEXP_SLACK(ctx->unexp_max);
    int full = ctx->unexp_max != 0 && ctx->unexp_bytes >= ctx->unexp_max;

    if (soft != ctx->ifaces_pressed) {
        ctx->ifaces_pressed = soft;
        for (int i = 0; i < ctx->n_ifaces; i++) {
            ctx->ifaces[i]->rx_pressure = soft;
            if (ctx->ifaces[i]->ops->pressure_changed != NULL)
                ctx->ifaces[i]->ops->pressure_changed(ctx->ifaces[i]);
        }
        util_debug("unexpected messages hold %zu bytes: %s", ctx->unexp_bytes,
                   soft ? "past the soft bound, senders send rendezvous" : "below the soft bound again");
    }
    if (full == ctx->proto.unexp_full)
        return;
    ctx->proto.unexp_full = full;
    ctx->proto.rts_admitted = 0; /* headers are charged: the bound counts those taken */
    for (int i = 0; i < ctx->n_ifaces; i++)
        ctx->ifaces[i]->rx_full = full;
    util_debug("unexpected messages hold %zu bytes: %s", ctx->unexp_bytes,
               full ? "at the bound, senders wait" : "below the bound again");
}

void core_unexp_charge(tmx_context_h ctx, struct tmx_message *msg, size_t bytes)
{
    msg->charge = sizeof(*msg) + CORE_UNEXP_INDEX_COST + bytes;
    ctx->unexp_bytes += msg->charge;
    unexp_update(ctx);
}

void core_msg_free(tmx_context_h ctx, struct tmx_message *msg)
{
    if (msg->charge != 0) {
        ctx->unexp_bytes -= msg->charge;
        unexp_update(ctx);
    }
    util_dlist_unlink(&msg->link);
    msg->ctx = NULL;
    util_pool_put(&ctx->msg_pool, msg);
    if (__builtin_expect(ctx->msg_pool.in_use == 0 && ctx->msg_pool.n_chunks > 1, 0))
        core_pools_trim(ctx, core_now_us());
}

TMX_API tmx_status_t tmx_context_memory(tmx_context_h ctx, size_t *mapped)
{
    if (ctx == NULL || mapped == NULL) {
        util_error("tmx_context_memory: NULL %s", ctx == NULL ? "context" : "argument");
        return TMX_ERR_INVALID;
    }
    core_lock(ctx);
    *mapped = util_pool_bytes(&ctx->req_pool) + util_pool_bytes(&ctx->msg_pool);
    core_unlock(ctx);
    return TMX_OK;
}

TMX_API tmx_status_t tmx_job_info(tmx_context_h ctx, uint32_t *rank, uint32_t *size)
{
    if (ctx == NULL || rank == NULL || size == NULL) {
        util_error("tmx_job_info: NULL argument");
        return TMX_ERR_INVALID;
    }
    if (!boot_job_in(&ctx->job))
        return TMX_ERR_NOT_FOUND;
    *rank = ctx->job.rank;
    *size = ctx->job.size;
    return TMX_OK;
}

/* Peers may need our ACKs or FINs to reach the barrier at all. */
static void barrier_idle(void *arg)
{
    core_progress(arg);
}

TMX_API tmx_status_t tmx_job_barrier(tmx_context_h ctx)
{
    tmx_status_t st;

    if (ctx == NULL) {
        util_error("tmx_job_barrier: NULL context");
        return TMX_ERR_INVALID;
    }
    if (!boot_job_in(&ctx->job)) {
        util_error("tmx_job_barrier: this context is not part of a launched job");
        return TMX_ERR_NOT_FOUND;
    }
    core_lock(ctx);
    st = boot_job_barrier(&ctx->job, barrier_idle, ctx);
    core_unlock(ctx);
    return st;
}
