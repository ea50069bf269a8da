/*
 * Waiting a short while for another thread or process that holds
 * something: yield the processor a number of times, then sleep.
 *
 * A loop of sched_yield() alone does not make sure the one awaited runs:
 * on the test machine's kernel (Linux 6.18) ranks of Open MPI that
 * yielded in a loop while they waited kept their processors for minutes
 * while the runnable threads of other processes got almost none
 * (bench/results/stalls.md). After UTIL_SPIN_YIELDS yields the waiter
 * sleeps, 50 us doubling to 800 us, which gives the processor up.
 */
#ifndef TMX_UTIL_SPIN_H
#define TMX_UTIL_SPIN_H

#include <sched.h>
#include <time.h>

#define UTIL_SPIN_YIELDS 128  /* yields before the first sleep */
#define UTIL_SPIN_SLEEP_NS 50000L
#define UTIL_SPIN_DOUBLINGS 4 /* the sleep doubles this many times */

/* One turn of such a wait; *turns starts at 0 for each wait. */
static inline void util_spin_wait(unsigned *turns)
{
    unsigned k = *turns;

    if (k < UTIL_SPIN_YIELDS) {
        *turns = k + 1;
        sched_yield();
        return;
    }
    k -= UTIL_SPIN_YIELDS;
    if (k < UTIL_SPIN_DOUBLINGS)
        (*turns)++;
    struct timespec ts = {0, UTIL_SPIN_SLEEP_NS << k};
    nanosleep(&ts, NULL);
}

#endif
