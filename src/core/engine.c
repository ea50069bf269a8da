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
 *   application neither is inside the context nor made a progress pass
 *   since the last look (an application that only tests its requests does
 *   not progress), so that small messages and udp's housekeeping still
 *   move within milliseconds;
 * - looking, while such requests are live and the application progresses
 *   the context: after TMX_OFFLOAD_POLL_US, then at a period that doubles
 *   while the application polls (up to ENGINE_LOOK_MAX_US) and starts
 *   again when it calls only now and then or a new large request starts,
 *   it checks whether the application is inside or made a progress pass
 *   since its last look (core_progress counts them), and leaves the
 *   traffic to it. The doubling keeps a look from coming later than the
 *   application's polling so far, and makes an application that waits
 *   long in tmx (or in MPI_Wait over it) cost a few looks a second, not
 *   thousands: with looks at most 160 us apart, Open MPI jobs whose ranks
 *   poll while they wait stalled for minutes across two test hosts, the
 *   test machine's scheduler giving one host's processes almost no
 *   processor time (bench/results/stalls.md). A look 1 ms or more away is
 *   a wait on the futex word, which a new large request interrupts
 *   (core_offload_big);
 * - working, once a whole period passed without the application: it takes
 *   the lock, progresses until nothing moves, and sleeps in the
 *   transports, where a sender wakes it.
 */
#include <errno.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sched.h>
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
#define ENGINE_LOOK_MAX_US 20000  /* looks double their period up to this (or the setting) */
#define ENGINE_LOOK_DENSE 4       /* the application polls: a call per 4 periods at least */
#define ENGINE_NAP_US 1000        /* a look at least this far off can be interrupted */
#define ENGINE_TRIES 64           /* tries to get in while asleep, at each look */

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

/* The wait until the next look while the application is busy: a plain
 * sleep when short; when long, a wait on the futex word that a large
 * request started meanwhile (off_posts moves past posts) cuts short. */
static void engine_look_wait(tmx_context_h ctx, uint64_t us, unsigned posts)
{
    if (us < ENGINE_NAP_US) {
        sleep_us(us);
        return;
    }
    atomic_store(&ctx->off_sleeping, 1); /* seq_cst: see core_offload_big */
    if (atomic_load(&ctx->off_posts) == posts)
        futex_wait_us(&ctx->off_word, 0, us);
    atomic_store_explicit(&ctx->off_sleeping, 0, memory_order_release);
    atomic_store_explicit(&ctx->off_word, 0, memory_order_relaxed);
}

void core_offload_wake(tmx_context_h ctx)
{
    atomic_store_explicit(&ctx->off_word, 1, memory_order_release);
    syscall(SYS_futex, &ctx->off_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* The application waits inside tmx_request_wait, which advances the
 * traffic: no look until it leaves (core_offload_wait_end), starts a
 * large request, or us pass. */
static void engine_wait_out(tmx_context_h ctx, uint64_t us, unsigned posts)
{
    atomic_store(&ctx->off_sleeping, 2); /* seq_cst: see core_offload_wait_end */
    if (atomic_load(&ctx->app_waiting) != 0 && atomic_load(&ctx->off_posts) == posts)
        futex_wait_us(&ctx->off_word, 0, us);
    atomic_store_explicit(&ctx->off_sleeping, 0, memory_order_release);
    atomic_store_explicit(&ctx->off_word, 0, memory_order_relaxed);
}

void core_offload_big(tmx_context_h ctx, struct tmx_request *req)
{
    req->big = 1;
    /* seq_cst on both sides (here and where the thread goes to sleep): each
     * writes one word and then reads the other, and at least one must see
     * the other's write, or the wake-up is lost (for up to
     * ENGINE_SLEEP_IDLE_US asleep, or a long look's ENGINE_NAP_US or
     * more). The engine sleeps on the word only asleep and in long looks,
     * so a post costs a system call only then. */
    atomic_store_explicit(&ctx->off_post_calls, atomic_load_explicit(&ctx->app_calls, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_fetch_add(&ctx->off_posts, 1);
    atomic_fetch_add(&ctx->off_big, 1);
    if (atomic_load(&ctx->off_sleeping))
        core_offload_wake(ctx);
}

/* ------------------------------------------------------------- the lock */

/* With one application thread (TMX_THREAD_SINGLE), the context's lock is
 * asymmetric: the application, which enters on every call, marks itself
 * inside with a plain store and checks the engine's mark after a compiler
 * barrier (core_lock); the engine's thread, which enters rarely, marks
 * itself, runs membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) so that every
 * thread of the process passes a full barrier, and then checks the
 * application's mark. Either sees the other and the engine backs off; the
 * application waits only while the engine works. ThreadSanitizer cannot
 * see membarrier's ordering, so sanitized builds keep the mutex. */
#if defined(__SANITIZE_THREAD__)
#define ENGINE_ASYM_OK 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ENGINE_ASYM_OK 0
#endif
#endif
#ifndef ENGINE_ASYM_OK
#define ENGINE_ASYM_OK 1
#endif

void core_offload_lock_mode(tmx_context_h ctx, int app_threads)
{
    ctx->asym = 0;
    if (!ENGINE_ASYM_OK || app_threads > 1)
        return;
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0) {
        util_debug("%s: no membarrier (%s): the engine shares a mutex", ctx->name, strerror(errno));
        return;
    }
    ctx->asym = 1;
}

void core_asym_wait(tmx_context_h ctx)
{
    for (;;) {
        atomic_store_explicit(&ctx->app_in, 0, memory_order_release);
        /* The engine works a bounded turn. A yield, not a sleep: while we
         * are out (app_in 0) the engine may take its next turn at once,
         * and a sleeping waiter would rarely catch the gap between. */
        while (atomic_load_explicit(&ctx->eng_in, memory_order_acquire))
            sched_yield();
        atomic_store_explicit(&ctx->app_in, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        if (!atomic_load_explicit(&ctx->eng_in, memory_order_acquire))
            return;
    }
}

static int engine_trylock(tmx_context_h ctx)
{
    if (!ctx->asym)
        return pthread_mutex_trylock(&ctx->lock) == 0;
    if (atomic_load_explicit(&ctx->app_in, memory_order_relaxed))
        return 0;
    atomic_store_explicit(&ctx->eng_in, 1, memory_order_relaxed);
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
        atomic_thread_fence(memory_order_seq_cst); /* registered, so not expected */
    if (atomic_load_explicit(&ctx->app_in, memory_order_acquire)) {
        atomic_store_explicit(&ctx->eng_in, 0, memory_order_release);
        return 0;
    }
    return 1;
}

static void engine_unlock(tmx_context_h ctx)
{
    if (ctx->asym)
        atomic_store_explicit(&ctx->eng_in, 0, memory_order_release);
    else
        pthread_mutex_unlock(&ctx->lock);
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
    uint64_t period = 0;  /* the wait before this look, us */
    unsigned posts = 0;   /* off_posts at the last look */
    int woke = 0;         /* slept in the transports since the last turn */

    /* Its short sleeps must be short: the default slack is 50 us. */
    prctl(PR_SET_TIMERSLACK, 1000UL);
    /* the side of the transports' asymmetric wake-ups that fences (tl.h) */
    for (int i = 0; i < ctx->n_ifaces; i++)
        atomic_store_explicit(&ctx->ifaces[i]->rare_thread, (uintptr_t)pthread_self(), memory_order_relaxed);
    while (!atomic_load_explicit(&ctx->off_stop, memory_order_acquire)) {
        uint64_t calls;
        int events;

        if (atomic_load_explicit(&ctx->off_big, memory_order_acquire) == 0) {
            atomic_store(&ctx->off_sleeping, 1); /* seq_cst: see core_offload_big */
            /* offered receives complete on their senders' WDONE, which
             * an application that only tests leaves to these looks */
            if (atomic_load(&ctx->off_big) == 0)
                futex_wait_us(&ctx->off_word, 0,
                              atomic_load_explicit(&ctx->off_offered, memory_order_relaxed) != 0
                                  ? ENGINE_NAP_US
                                  : ENGINE_SLEEP_IDLE_US);
            atomic_store_explicit(&ctx->off_sleeping, 0, memory_order_release);
            atomic_store_explicit(&ctx->off_word, 0, memory_order_relaxed);
            calls = atomic_load_explicit(&ctx->app_calls, memory_order_relaxed);
            /* The application made no progress since the last look: it is
             * away, or only tests its requests, which does not progress
             * (and enters the context briefly, so a few tries get in). */
            for (int i = 0; i < ENGINE_TRIES && calls == seen; i++) {
                if (engine_trylock(ctx)) {
                    engine_work(ctx); /* housekeeping while the application is away */
                    calls = atomic_load_explicit(&ctx->app_calls, memory_order_relaxed);
                    engine_unlock(ctx);
                    break;
                }
                sched_yield();
            }
            seen = calls; /* not counting our own progress */
            continue;
        }
        calls = atomic_load_explicit(&ctx->app_calls, memory_order_relaxed);
        if (atomic_load_explicit(&ctx->off_posts, memory_order_relaxed) != posts) {
            /* a new transfer: the application may turn to computing now */
            posts = atomic_load_explicit(&ctx->off_posts, memory_order_relaxed);
            backoff = 0;
            /* the application's progress before the post does not count:
             * it is away if it made none since */
            seen = atomic_load_explicit(&ctx->off_post_calls, memory_order_relaxed);
            period = ctx->cfg.offload_poll_us;
            engine_look_wait(ctx, period, posts);
            continue;
        }
        if (calls != seen || !engine_trylock(ctx)) {
            /* The application advances its traffic itself. While it is
             * inside all along or polls (a call per ENGINE_LOOK_DENSE
             * periods of TMX_OFFLOAD_POLL_US at least: a wait, not a
             * computation that tests now and then) the looks grow rarer,
             * so that on a core shared with it they cost little; otherwise
             * they start over, so that the engine takes over soon once it
             * stops calling. */
            uint64_t poll = ctx->cfg.offload_poll_us;
            uint64_t cap = poll > ENGINE_LOOK_MAX_US ? poll : ENGINE_LOOK_MAX_US;

            if (calls != seen && (calls - seen) * poll * ENGINE_LOOK_DENSE < period)
                backoff = 0;
            period = poll << backoff < cap ? poll << backoff : cap;
            if (poll << backoff < cap)
                backoff++;
            seen = calls;
            if (atomic_load_explicit(&ctx->app_waiting, memory_order_relaxed) != 0) {
                /* until the wait ended (or was ending as we looked): its
                 * progress does not count, and the application may compute
                 * now */
                engine_wait_out(ctx, cap, posts);
                seen = atomic_load_explicit(&ctx->app_calls, memory_order_relaxed);
                backoff = 0;
                engine_look_wait(ctx, poll, posts);
                continue;
            }
            engine_look_wait(ctx, period, posts);
            continue;
        }
        backoff = 0;
        if (woke) {
            for (int i = 0; i < ctx->n_ifaces; i++)
                ctx->ifaces[i]->quiet = 0; /* what woke us may be anywhere */
            woke = 0;
        }
        events = engine_work(ctx);
        seen = atomic_load_explicit(&ctx->app_calls, memory_order_relaxed); /* not counting ours */
        engine_unlock(ctx);
        if (events > 0 || atomic_load_explicit(&ctx->off_big, memory_order_acquire) == 0)
            continue;
        core_idle_sleep(ctx, ENGINE_SLEEP_BUSY_US);
        woke = 1;
        /* seen stays: an entry while we slept sends us back to looking */
    }
    return NULL;
}

tmx_status_t core_offload_start(tmx_context_h ctx)
{
    int err;

    atomic_store(&ctx->off_stop, 0);
    ctx->off_on = 2; /* the thread runs: stop it before teardown (set before it starts) */
    if ((err = pthread_create(&ctx->off_thread, NULL, engine_main, ctx)) != 0) {
        ctx->off_on = 1;
        util_error("offload engine: cannot start its thread: %s", strerror(err));
        return TMX_ERR_NOMEM;
    }
    util_debug("%s: offload engine started (looks from every %llu us)", ctx->name,
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
