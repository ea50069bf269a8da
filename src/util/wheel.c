#include "util/wheel.h"

void util_wheel_init(util_wheel_t *w, uint64_t tick_us, uint64_t now_us)
{
    for (int i = 0; i < UTIL_WHEEL_SLOTS; i++)
        util_dlist_init(&w->slots[i]);
    w->tick_us = tick_us;
    w->now_tick = now_us / tick_us;
    w->next_us = (w->now_tick + 1) * tick_us;
    w->n_armed = 0;
}

void util_timer_arm(util_wheel_t *w, util_timer_t *t, uint64_t due_us)
{
    /* Rounded up: the slot is expired once now reaches the tick's start,
     * which must not be before due_us, or the timer waits a whole turn. */
    uint64_t tick = (due_us + w->tick_us - 1) / w->tick_us;

    util_timer_cancel(t);
    if (tick <= w->now_tick)
        tick = w->now_tick + 1;
    t->due_us = due_us;
    t->armed = 1;
    t->wheel = w;
    w->n_armed++;
    util_dlist_push_tail(&w->slots[tick % UTIL_WHEEL_SLOTS], &t->link);
}

void util_timer_cancel(util_timer_t *t)
{
    if (!t->armed)
        return;
    util_dlist_unlink(&t->link);
    t->wheel->n_armed--;
    t->armed = 0;
}

/* Fires the due timers of one slot; a timer may re-arm itself. */
static int expire_slot(util_dlist_t *slot, uint64_t now_us)
{
    util_dlist_t due, *pos, *tmp;
    int n = 0;

    util_dlist_init(&due);
    util_dlist_foreach_safe(pos, tmp, slot) {
        util_timer_t *t = util_container_of(pos, util_timer_t, link);
        if (t->due_us <= now_us) {
            util_dlist_unlink(&t->link);
            util_dlist_push_tail(&due, &t->link);
        }
    }
    while (!util_dlist_empty(&due)) {
        util_timer_t *t = util_container_of(due.next, util_timer_t, link);
        util_timer_cancel(t);
        t->fire(t);
        n++;
    }
    return n;
}

int util_wheel_expire(util_wheel_t *w, uint64_t now_us)
{
    uint64_t tick;
    int n = 0;

    if (now_us < w->next_us) /* most polls: still in the last tick expired */
        return 0;
    tick = now_us / w->tick_us;
    if (tick - w->now_tick > UTIL_WHEEL_SLOTS)
        w->now_tick = tick - UTIL_WHEEL_SLOTS;
    while (w->now_tick < tick) {
        w->now_tick++;
        n += expire_slot(&w->slots[w->now_tick % UTIL_WHEEL_SLOTS], now_us);
    }
    w->next_us = (w->now_tick + 1) * w->tick_us;
    return n;
}
