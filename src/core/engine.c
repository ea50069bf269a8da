/*
 * The offload engine's thread (TMX_OFFLOAD, docs/offload.md): it advances
 * a context's traffic while the application computes without calling
 * tmx, so that a rendezvous read, its FIN, a long stream of cells, the
 * copy of a message into its posted receive, udp's acknowledgements and
 * answers to keepalives happen in the background and computation overlaps
 * communication.
 *
 * It must not slow an application that calls tmx all the time (a
 * ping-pong of small messages, where every wake-up on a busy core costs
 * microseconds), so it works in three modes:
 *
 * - asleep, while no request of CORE_OFF_BIG bytes or more is live: it
 *   waits on its futex word for such a request (core_offload_big wakes
 *   it), and every ENGINE_SLEEP_IDLE_US looks once, progressing if the
 *   application is not inside the context, so that small messages and
 *   udp's housekeeping still move within milliseconds;
 * - looking, while such requests are live and the application calls
 *   into the context: every TMX_OFFLOAD_POLL_US (backing off to 16 times
 *   that while the application stays busy) it checks whether the
 *   application holds the lock or has entered the context since its last
 *   look (core_lock counts the entries), and leaves the traffic to it;
 * - working, once a whole period passed without the application: it takes
 *   the lock, progresses until nothing moves, and sleeps in the
 *   transports, where a sender wakes it.
 */
#include <errno.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "util/log.h"

#define ENGINE_PASSES 64          /* progress passes per turn while work keeps coming */
#define ENGINE_SLEEP_BUSY_US 1000 /* a sleep in the transports while big requests are live */
#define ENGINE_SLEEP_IDLE_US 5000 /* a look this often while none is */
#define ENGINE_BACKOFF_MAX 4      /* looks at most 2^4 periods apart */

static void sleep_us(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};

    nanosleep(&ts, NULL);
}

static void futex_wait_us(atomic_int *word, int val, uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};

    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

void core_offload_big(tmx_context_h ctx, struct tmx_request *req)
{
    req->big = 1;
    if (atomic_fetch_add_explicit(&ctx->off_big, 1, memory_order_acq_rel) == 0 &&
        atomic_load_explicit(&ctx->off_sleeping, memory_order_acquire)) {
        atomic_store_explicit(&ctx->off_word, 1, memory_order_release);
        syscall(SYS_futex, &ctx->off_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

/* Progresses until nothing moves; the caller holds the lock. */
static int engine_work(tmx_context_h ctx)
{
    int events = 0;

    for (int i = 0; i < ENGINE_PASSES; i++) {
        int ev = core_progress(ctx);
        events += ev;
        if (ev == 0)
            break;
    }
    core_check_peers(ctx, core_now_us());
    return events;
}

static void *engine_main(void *arg)
{
    tmx_context_h ctx = arg;
    uint64_t seen = atomic_load_explicit(&ctx->app_calls, memory_order_relaxed);
    unsigned backoff = 0; /* looks in a row that found the application busy */

    /* Its short sleeps must be short: the default slack is 50 us. */
    prctl(PR_SET_TIMERSLACK, 1000UL);
    while (!atomic_load_explicit(&ctx->off_stop, memory_order_acquire)) {
        uint64_t calls;
        int events;

        if (atomic_load_explicit(&ctx->off_big, memory_order_acquire) == 0) {
            atomic_store_explicit(&ctx->off_sleeping, 1, memory_order_release);
            if (atomic_load_explicit(&ctx->off_big, memory_order_acquire) == 0)
                futex_wait_us(&ctx->off_word, 0, ENGINE_SLEEP_IDLE_US);
            atomic_store_explicit(&ctx->off_sleeping, 0, memory_order_release);
            atomic_store_explicit(&ctx->off_word, 0, memory_order_relaxed);
            calls = atomic_load_explicit(&ctx->app_calls, memory_order_relaxed);
            if (calls == seen && pthread_mutex_trylock(&ctx->lock) == 0) {
                engine_work(ctx); /* housekeeping while the application is away */
                pthread_mutex_unlock(&ctx->lock);
            }
            seen = calls;
            continue;
        }
        calls = atomic_load_explicit(&ctx->app_calls, memory_order_relaxed);
        if (calls != seen || pthread_mutex_trylock(&ctx->lock) != 0) {
            /* The application advances its traffic itself. The longer it
             * does, the rarer the looks (up to 16 periods apart), so that
             * on a core shared with it they cost little. */
            seen = calls;
            sleep_us(ctx->cfg.offload_poll_us << (backoff < ENGINE_BACKOFF_MAX ? backoff : ENGINE_BACKOFF_MAX));
            backoff++;
            continue;
        }
        backoff = 0;
        events = engine_work(ctx);
        pthread_mutex_unlock(&ctx->lock);
        if (events > 0 || atomic_load_explicit(&ctx->off_big, memory_order_acquire) == 0)
            continue;
        core_idle_sleep(ctx, ENGINE_SLEEP_BUSY_US);
        pthread_mutex_lock(&ctx->lock);
        for (int i = 0; i < ctx->n_ifaces; i++)
            ctx->ifaces[i]->quiet = 0; /* what woke us may be anywhere */
        pthread_mutex_unlock(&ctx->lock);
        /* seen stays: an entry while we slept sends us back to looking */
    }
    return NULL;
}

tmx_status_t core_offload_start(tmx_context_h ctx)
{
    int err;

    atomic_store(&ctx->off_stop, 0);
    if ((err = pthread_create(&ctx->off_thread, NULL, engine_main, ctx)) != 0) {
        util_error("offload engine: cannot start its thread: %s", strerror(err));
        return TMX_ERR_NOMEM;
    }
    ctx->off_on = 2; /* the thread runs: stop it before teardown */
    util_debug("%s: offload engine started (looks every %llu us)", ctx->name,
               (unsigned long long)ctx->cfg.offload_poll_us);
    return TMX_OK;
}

void core_offload_stop(tmx_context_h ctx)
{
    if (ctx->off_on != 2)
        return;
    atomic_store_explicit(&ctx->off_stop, 1, memory_order_release);
    atomic_store_explicit(&ctx->off_word, 1, memory_order_release);
    syscall(SYS_futex, &ctx->off_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    pthread_join(ctx->off_thread, NULL);
    ctx->off_on = 1;
}
