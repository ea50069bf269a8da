/*
 * A hashed timer wheel (seed 001's "hotel"): timers hash into one slot per
 * tick, so arming, cancelling and expiring cost O(1) however many timers
 * run. A timer further than the wheel's span sits in the slot it hashes to
 * and is looked at once per turn until it is due.
 */
#ifndef TMX_UTIL_WHEEL_H
#define TMX_UTIL_WHEEL_H

#include <stdint.h>

#include "util/list.h"

#define UTIL_WHEEL_SLOTS 256

typedef struct util_timer {
    util_dlist_t link;
    uint64_t due_us;
    int armed;
    struct util_wheel *wheel; /* while armed */
    void (*fire)(struct util_timer *t);
} util_timer_t;

typedef struct util_wheel {
    util_dlist_t slots[UTIL_WHEEL_SLOTS];
    uint64_t tick_us;   /* slot width */
    uint64_t now_tick;  /* last tick expired */
    uint64_t next_us;   /* start of the tick after now_tick: nothing to do before */
    uint32_t n_armed;   /* timers armed */
} util_wheel_t;

void util_wheel_init(util_wheel_t *w, uint64_t tick_us, uint64_t now_us);
void util_timer_arm(util_wheel_t *w, util_timer_t *t, uint64_t due_us);
void util_timer_cancel(util_timer_t *t);

/* Fires every timer due by now_us; returns how many fired. */
int util_wheel_expire(util_wheel_t *w, uint64_t now_us);

#endif
