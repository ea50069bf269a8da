/* One-cache-line ping-pong between two processes pinned to two cores.
 *
 * A single 64-bit counter lives in a 64-byte-aligned line of a shared
 * anonymous mapping. The parent (core A) waits for an even value and
 * stores value+1 (release); the child (core B) waits for an odd value and
 * stores value+1. Each store moves the line to the other core once, so
 * one-way latency = elapsed / (2 * iterations): the floor for any
 * shared-memory message, which needs at least that one line transfer.
 *
 * usage: pingpong [ITERS [TRIALS [CORE_A CORE_B]]]
 * prints: pingpong_oneway_ns best=<ns> median=<ns> trials=<n> iters=<n>
 */
#include "common.h"
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

struct line {
    _Alignas(64) volatile uint64_t v;
    char pad[56];
};

static void play(struct line *l, uint64_t parity, uint64_t last)
{
    for (;;) {
        uint64_t x;
        while (((x = __atomic_load_n(&l->v, __ATOMIC_ACQUIRE)) & 1) != parity)
            __builtin_ia32_pause();
        __atomic_store_n(&l->v, x + 1, __ATOMIC_RELEASE);
        if (x + 1 >= last)
            return;
    }
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 1000000;
    int trials = argc > 2 ? atoi(argv[2]) : 5;
    int ca = argc > 4 ? atoi(argv[3]) : 0, cb = argc > 4 ? atoi(argv[4]) : 1;
    double ns[64];

    if (iters <= 0 || trials <= 0 || trials > 64) {
        fprintf(stderr, "usage: pingpong [ITERS [TRIALS [CORE_A CORE_B]]]\n");
        return 2;
    }
    struct line *l = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (l == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (int t = 0; t < trials; t++) {
        uint64_t warm = (uint64_t)iters / 10 * 2, last = warm + 2 * (uint64_t)iters;
        __atomic_store_n(&l->v, 0, __ATOMIC_SEQ_CST);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the parent */
            pin(cb);
            play(l, 1, last); /* child answers odd values */
            _exit(0);
        }
        pin(ca);
        /* The parent plays even values (it moves first, from 0), the child
         * odd ones. The first `warm` transfers are a warm-up; the clock
         * runs from the parent seeing `warm` to it seeing `last`, that is
         * 2*iters line transfers (iters round trips). */
        double t0 = 0;
        for (;;) {
            uint64_t x;
            while (((x = __atomic_load_n(&l->v, __ATOMIC_ACQUIRE)) & 1) != 0)
                __builtin_ia32_pause();
            if (x == warm)
                t0 = now_s();
            if (x >= last)
                break;
            __atomic_store_n(&l->v, x + 1, __ATOMIC_RELEASE);
        }
        double dt = now_s() - t0;
        int st;
        waitpid(pid, &st, 0);
        ns[t] = dt * 1e9 / (double)(last - warm);
    }
    double best = ns[0];
    for (int t = 1; t < trials; t++)
        if (ns[t] < best)
            best = ns[t];
    printf("pingpong_oneway_ns best=%.1f median=%.1f trials=%d iters=%ld\n", best, median(ns, trials), trials, iters);
    return 0;
}
