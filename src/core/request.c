#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "core/core.h"
#include "proto/proto.h"
#include "util/copy.h"
#include "util/hash.h"
#include "util/log.h"

#define TMX_API __attribute__((visibility("default")))
#define CORE_YIELD_POLLS 200      /* polls with sched_yield before sleeping */
#define CORE_PEER_CHECK_US 20000  /* dead-peer checks while idle */
#define CORE_POOL_TRIM_US 20000   /* idle pools trimmed at most this often */
#define CORE_SHARED_SLEEP_US 500  /* slice per transport when several sleep */
#define CORE_YIELD_SHARED_US 2    /* a yield this long ran someone else */

/* Says why core_op_params_check() refused the parameters. */
tmx_status_t core_op_params_refuse(const tmx_op_params_t *params, uint32_t allowed_flags)
{
    if (params->field_mask & ~(uint64_t)CORE_OP_FIELDS)
        util_error("unknown operation field bits 0x%llx",
                   (unsigned long long)(params->field_mask & ~(uint64_t)CORE_OP_FIELDS));
    else
        util_error("flag bits 0x%x not allowed for this operation", params->flags & ~allowed_flags);
    return TMX_ERR_INVALID;
}

struct tmx_request *core_req_alloc(tmx_context_h ctx, const tmx_op_params_t *params,
                                   tmx_op_type_t op)
{
    struct tmx_request *req = util_pool_get(&ctx->req_pool);

    if (req == NULL) {
        util_error("out of memory allocating a request");
        return NULL;
    }
    util_zero(req, offsetof(struct tmx_request, p));
    proto_req_init(&req->p);
    req->ctx = ctx;
    req->p.comp.op = op;
    if (params != NULL) {
        uint64_t f = params->field_mask;
        req->p.flags = (f & TMX_OP_FIELD_FLAGS) ? params->flags : 0;
        req->p.comp.user_context = (f & TMX_OP_FIELD_USER_CONTEXT) ? params->user_context : NULL;
        /* a receive's data is its sender's, set when a message matches */
        if (op == TMX_OP_TSEND && ((f & TMX_OP_FIELD_DATA) || (req->p.flags & TMX_OP_FLAG_DATA))) {
            req->p.comp.has_data = 1;
            req->p.comp.data = (f & TMX_OP_FIELD_DATA) ? params->data : 0;
        }
    }
    req->p.comp.status = TMX_INPROGRESS;
    if (!(req->p.flags & TMX_OP_FLAG_NO_CQ)) {
        if (core_cq_reserve(&ctx->cq) != TMX_OK) {
            util_pool_put(&ctx->req_pool, req);
            return NULL;
        }
        req->cq_slot = 1;
    }
    util_dlist_push_tail(&ctx->reqs, &req->link);
    return req;
}

void core_req_release(struct tmx_request *req)
{
    tmx_context_h ctx = req->ctx;

    req->handle_held = 0; /* a handle to it, kept by mistake, is stale now */
    if (req->cq_slot) {
        req->cq_slot = 0;
        ctx->cq.reserved--;
    }
    if (req->owns_buf) {
        free(req->p.buf);
        req->owns_buf = 0;
    }
    util_dlist_unlink(&req->link);
    util_pool_put(&ctx->req_pool, req);
    if (__builtin_expect(ctx->req_pool.in_use == 0 && ctx->req_pool.n_chunks > 1, 0))
        core_pools_trim(ctx, core_now_us());
}

void core_req_complete(struct tmx_request *req, tmx_status_t status)
{
    if (req->big) {
        req->big = 0;
        atomic_fetch_sub_explicit(&req->ctx->off_big, 1, memory_order_relaxed);
    }
    if (__builtin_expect(req->offered, 0)) {
        req->offered = 0;
        atomic_fetch_sub_explicit(&req->ctx->off_offered, 1, memory_order_relaxed);
    }
    req->state = CORE_REQ_DONE;
    req->p.comp.status = status;
    if (req->cq_slot) {
        req->cq_slot = 0;
        req->ctx->cq.reserved--; /* the push below takes its place */
    }
    if (!(req->p.flags & TMX_OP_FLAG_NO_CQ) &&
        (status != TMX_OK || !(req->p.flags & TMX_OP_FLAG_CQ_ERRORS_ONLY)))
        core_cq_push(&req->ctx->cq, &req->p.comp);
    if (!req->handle_held)
        core_req_release(req);
}

/* -------------------------------------------------------------- progress */

/* No request or message left: the pools give a burst's chunks back. At
 * most every CORE_POOL_TRIM_US (from progress, idle waits and the return
 * of a pool's last object): more often, a loop of bursts would give them
 * back and fault them in again every time round. */
void core_pools_trim(tmx_context_h ctx, int64_t now)
{
    if (now - ctx->pool_trim_us < CORE_POOL_TRIM_US)
        return;
    ctx->pool_trim_us = now;
    if (ctx->req_pool.in_use == 0)
        util_pool_trim_to(&ctx->req_pool, 1);
    if (ctx->msg_pool.in_use == 0)
        util_pool_trim_to(&ctx->msg_pool, 1);
}

/* Every TL_QUIET_POLL_EVERY polls: the quiet transports too, if it is
 * time to look at them. */
static __attribute__((noinline)) int progress_look(tmx_context_h ctx)
{
    int events = 0, look_all = 0;
    int64_t now = core_now_us();

    core_pools_trim(ctx, now);

    if (now - ctx->quiet_look_us >= (ctx->busy_polls != 0 ? TL_QUIET_BUSY_LOOK_US : TL_QUIET_LOOK_US)) {
        ctx->quiet_look_us = now;
        ctx->busy_polls = 0;
        look_all = 1;
    }
    for (int i = 0; i < ctx->n_ifaces; i++) {
        tl_iface_t *iface = ctx->ifaces[i];
        if (!iface->quiet || look_all)
            events += iface->ops->progress(iface);
    }
    return events;
}

static __attribute__((noinline)) int progress_proto(tmx_context_h ctx)
{
    return proto_progress(&ctx->proto);
}

int core_progress(tmx_context_h ctx)
{
    int events = 0;

    /* Whoever progresses holds the context, so a plain increment: the
     * offload engine only samples it, to see the application progress. */
    if (ctx->off_on)
        atomic_store_explicit(&ctx->app_calls,
                              atomic_load_explicit(&ctx->app_calls, memory_order_relaxed) + 1,
                              memory_order_relaxed);

    if (__builtin_expect((++ctx->polls & (TL_QUIET_POLL_EVERY - 1)) == 0, 0)) {
        events = progress_look(ctx);
    } else {
        for (int i = 0; i < ctx->n_ifaces; i++) {
            tl_iface_t *iface = ctx->ifaces[i];
            if (!iface->quiet)
                events += iface->ops->progress(iface);
        }
    }
    if (__builtin_expect(proto_has_work(&ctx->proto), 0))
        events += progress_proto(ctx);
    ctx->busy_polls += events > 0;
    return events;
}

/* ------------------------------------------------------------ public API */

/* A handle the caller still holds. A handle to a request already released
 * reads handle_held 0; one whose chunk the pool gave back reads all zeros
 * (mapped pools), ctx NULL included. Neither is taken. The second look,
 * under the lock, is what counts. */
static tmx_status_t request_check(const char *fn, tmx_request_h req)
{
    if (req == NULL) {
        util_error("%s: NULL request", fn);
        return TMX_ERR_INVALID;
    }
    if (req->ctx == NULL || !req->handle_held) {
        util_error("%s: request %p was already freed", fn, (void *)req);
        return TMX_ERR_INVALID;
    }
    return TMX_OK;
}

static tmx_status_t request_check_locked(const char *fn, tmx_request_h req)
{
    if (!req->handle_held) {
        util_error("%s: request %p was already freed", fn, (void *)req);
        return TMX_ERR_INVALID;
    }
    return TMX_OK;
}

TMX_API tmx_status_t tmx_request_test(tmx_request_h req, tmx_completion_t *out)
{
    tmx_status_t st;
    tmx_context_h ctx;

    if ((st = request_check("tmx_request_test", req)) != TMX_OK)
        return st;
    ctx = req->ctx;
    core_lock(ctx);
    if ((st = request_check_locked("tmx_request_test", req)) == TMX_OK) {
        st = req->state == CORE_REQ_DONE ? req->p.comp.status : TMX_INPROGRESS;
        if (st != TMX_INPROGRESS && out != NULL)
            *out = req->p.comp;
    }
    core_unlock(ctx);
    return st;
}

int64_t core_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void core_check_peers(tmx_context_h ctx, int64_t now)
{
    if (now < ctx->next_peer_check_us)
        return;
    ctx->next_peer_check_us = now + CORE_PEER_CHECK_US;
    core_watch_for_wildcards(ctx);
    core_pools_trim(ctx, now);
    for (int i = 0; i < ctx->n_ifaces; i++)
        ctx->ifaces[i]->ops->check_peers(ctx->ifaces[i]);
}

/* Sleeps in the transports: in the one that can sleep, or, with several,
 * in one poll() over the descriptors they arm (tl.h: wait_arm), so that
 * traffic through any of them wakes the thread at once. A transport that
 * cannot arm sends the thread back to taking turns: a short slice in
 * each one's wait(). */
void core_idle_sleep(tmx_context_h ctx, int64_t timeout_us)
{
    struct pollfd pfd[CORE_MAX_TLS];
    int8_t slot[CORE_MAX_TLS];
    int sleepers = 0, n = 0, ready = 0, none = 0;

    for (int i = 0; i < ctx->n_ifaces; i++)
        sleepers += ctx->ifaces[i]->ops->wait != tl_no_wait;
    if (sleepers == 0) {
        sched_yield();
        return;
    }
    for (int i = 0; i < ctx->n_ifaces; i++) {
        tl_iface_t *tl = ctx->ifaces[i];

        slot[i] = -1;
        if (sleepers == 1 || tl->ops->wait == tl_no_wait || none)
            continue;
        int64_t cap = -1;
        int r = tl->ops->wait_arm(tl, &pfd[n], &cap);

        if (r == TL_WAIT_NONE) {
            none = 1;
            continue;
        }
        slot[i] = (int8_t)n++;
        ready |= r == TL_WAIT_READY;
        if (cap >= 0 && (timeout_us < 0 || cap < timeout_us))
            timeout_us = cap;
    }
    if (n > 0 && !none && !ready) {
        struct timespec ts = {timeout_us / 1000000, (timeout_us % 1000000) * 1000};

        if (ppoll(pfd, (nfds_t)n, timeout_us < 0 ? NULL : &ts, NULL) <= 0) {
            for (int k = 0; k < n; k++)
                pfd[k].revents = 0;
        }
    }
    for (int i = 0; i < ctx->n_ifaces; i++) {
        if (slot[i] >= 0)
            ctx->ifaces[i]->ops->wait_done(ctx->ifaces[i], &pfd[slot[i]]);
    }
    if (ready || (n > 0 && !none))
        return;
    if (sleepers > 1 && (timeout_us < 0 || timeout_us > CORE_SHARED_SLEEP_US))
        timeout_us = CORE_SHARED_SLEEP_US;
    for (int i = 0; i < ctx->n_ifaces; i++) {
        if (ctx->ifaces[i]->ops->wait != tl_no_wait)
            ctx->ifaces[i]->ops->wait(ctx->ifaces[i], timeout_us);
    }
}

/* Yields the core, and learns from it whether spinning pays: a yield that
 * comes back at once found nobody else wanting this core, so the peer that
 * will answer runs elsewhere and long spins are cheap; a yield that took
 * long gave the core to someone (perhaps that very peer), so from now on
 * waits yield after a handful of polls. Spinning grows back step by step,
 * since a yield is also quick when the peer it waits for is asleep. */
static void idle_yield(tmx_context_h ctx)
{
    int64_t t0 = core_now_us();

    sched_yield();
    if (core_now_us() - t0 >= CORE_YIELD_SHARED_US)
        ctx->spin_polls = CORE_SPIN_POLLS_SHARED;
    else if (ctx->spin_polls < CORE_SPIN_POLLS)
        ctx->spin_polls *= 2;
}

/* Spin while an answer is likely within microseconds, then yield so that a
 * peer sharing this core runs, then sleep until a sender wakes us. The
 * caller holds the context lock; it is dropped while sleeping. */
void core_idle(tmx_context_h ctx, unsigned *spins, int64_t deadline_us)
{
    int64_t now;

    if (++*spins < ctx->spin_polls)
        return;
    if (*spins < ctx->spin_polls + CORE_YIELD_POLLS) {
        idle_yield(ctx);
        return;
    }
    now = core_now_us();
    core_check_peers(ctx, now);
    if (now >= deadline_us)
        return;
    core_unlock(ctx);
    core_idle_sleep(ctx, deadline_us - now < CORE_PEER_CHECK_US ? deadline_us - now : CORE_PEER_CHECK_US);
    core_lock(ctx);
    for (int i = 0; i < ctx->n_ifaces; i++)
        ctx->ifaces[i]->quiet = 0; /* what woke us may be anywhere */
}

/* A caller that waits by polling in a loop of its own never reaches
 * core_idle: Open MPI's ofi MTL, for one, spins on fi_cq_read until a
 * blocking send completes, without yielding. When ranks outnumber cores
 * that spin takes the core from the very rank whose read or FIN it waits
 * for, a time slice at a time; yielding here hands it over as a wait
 * would. */
void core_poll_yield(tmx_context_h ctx)
{
    ctx->idle_polls = 0;
    idle_yield(ctx);
    /* Such a caller never waits in tmx either, and a peer that died must
     * still fail what names it: the transports look (every
     * CORE_PEER_CHECK_US at most). Not the watch of a wildcard receive
     * (core_watch_for_wildcards), which connects to every peer: a waiter
     * pays that once, a poller would on every idle turn. */
    int64_t now = core_now_us();
    if (now >= ctx->next_poll_check_us) {
        ctx->next_poll_check_us = now + CORE_PEER_CHECK_US;
        for (int i = 0; i < ctx->n_ifaces; i++)
            ctx->ifaces[i]->ops->check_peers(ctx->ifaces[i]);
    }
}

/* When a wait of timeout_us (< 0: no limit) from now ends; a timeout too
 * long to add to the clock is no limit either. */
static int64_t wait_deadline(int64_t timeout_us)
{
    int64_t now;

    if (timeout_us < 0)
        return INT64_MAX;
    now = core_now_us();
    return timeout_us > INT64_MAX - now ? INT64_MAX : now + timeout_us;
}

TMX_API tmx_status_t tmx_request_wait(tmx_request_h req, int64_t timeout_us, tmx_completion_t *out)
{
    int64_t deadline = wait_deadline(timeout_us);
    tmx_status_t st;

    if ((st = request_check("tmx_request_wait", req)) != TMX_OK)
        return st;
    unsigned spins = 0, rounds = 0;
    tmx_context_h ctx = req->ctx;

    core_lock(ctx);
    if ((st = request_check_locked("tmx_request_wait", req)) != TMX_OK) {
        core_unlock(ctx);
        return st;
    }
    int waiting = req->state != CORE_REQ_DONE; /* one done already is no wait */

    if (waiting)
        core_offload_wait_begin(ctx);
    while (req->state != CORE_REQ_DONE) {
        /* busy rounds count too: other traffic, that keeps progress
         * finding work, must not hold the wait past its timeout */
        if ((++rounds & 63) == 0 && core_now_us() > deadline) {
            core_unlock(ctx);
            core_offload_wait_end(ctx, waiting);
            return TMX_ERR_TIMEOUT;
        }
        if (core_progress(ctx) > 0) {
            spins = 0;
            continue;
        }
        core_idle(ctx, &spins, deadline);
        /* the lock was dropped: another thread may have freed the handle
         * (a misuse TMX_THREAD_MULTIPLE still answers) */
        if ((st = request_check_locked("tmx_request_wait", req)) != TMX_OK) {
            core_unlock(ctx);
            core_offload_wait_end(ctx, waiting);
            return st;
        }
    }
    st = req->p.comp.status;
    if (out != NULL)
        *out = req->p.comp;
    core_unlock(ctx);
    core_offload_wait_end(ctx, waiting);
    return st;
}

static tmx_status_t request_cancel_locked(struct tmx_request *req)
{
    if (req->p.comp.op != TMX_OP_TRECV)
        return TMX_ERR_UNSUPPORTED;
    if (req->state == CORE_REQ_DONE || proto_recv_cancel(&req->ctx->proto, &req->p) != TMX_OK)
        return TMX_ERR_BUSY;
    core_req_complete(req, TMX_ERR_CANCELED);
    return TMX_OK;
}

TMX_API tmx_status_t tmx_request_cancel(tmx_request_h req)
{
    tmx_status_t st;

    tmx_context_h ctx;

    if ((st = request_check("tmx_request_cancel", req)) != TMX_OK)
        return st;
    ctx = req->ctx;
    core_lock(ctx);
    if ((st = request_check_locked("tmx_request_cancel", req)) == TMX_OK)
        st = request_cancel_locked(req);
    core_unlock(ctx);
    return st;
}

TMX_API tmx_status_t tmx_cancel(tmx_context_h ctx, void *user_context)
{
    util_dlist_t *pos;
    tmx_status_t st = TMX_ERR_NOT_FOUND;

    if (ctx == NULL) {
        util_error("tmx_cancel: NULL context");
        return TMX_ERR_INVALID;
    }
    core_lock(ctx);
    util_dlist_foreach(pos, &ctx->reqs) { /* oldest first */
        struct tmx_request *req = util_container_of(pos, struct tmx_request, link);
        if (req->p.comp.op == TMX_OP_TRECV && req->p.comp.user_context == user_context &&
            request_cancel_locked(req) == TMX_OK) {
            st = TMX_OK;
            break;
        }
    }
    core_unlock(ctx);
    return st;
}

TMX_API tmx_status_t tmx_request_free(tmx_request_h req)
{
    tmx_context_h ctx;
    tmx_status_t st;

    if ((st = request_check("tmx_request_free", req)) != TMX_OK)
        return st;
    ctx = req->ctx;
    core_lock(ctx);
    if ((st = request_check_locked("tmx_request_free", req)) != TMX_OK) {
        core_unlock(ctx);
        return st;
    }
    req->handle_held = 0;
    if (req->state == CORE_REQ_DONE)
        core_req_release(req);
    core_unlock(ctx);
    return TMX_OK;
}

TMX_API int tmx_wait(tmx_context_h ctx, int64_t timeout_us)
{
    int64_t deadline;
    unsigned spins = 0;
    int events = 0;

    if (ctx == NULL) {
        util_error("tmx_wait: NULL context");
        return TMX_ERR_INVALID;
    }
    deadline = wait_deadline(timeout_us);
    core_lock(ctx);
    while (ctx->cq.count == 0 && (events = core_progress(ctx)) == 0) {
        if ((spins & 63) == 63 && core_now_us() >= deadline)
            break;
        core_idle(ctx, &spins, deadline);
    }
    if (events == 0 && ctx->cq.count != 0)
        events = 1; /* a completion waits: not a timeout */
    core_unlock(ctx);
    return events;
}
