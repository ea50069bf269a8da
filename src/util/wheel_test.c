/* The timer wheel: timers fire once due, never a turn late, whatever the
 * offset of their due time inside a tick; cancel and re-arm. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "unit.h"

#include "util/wheel.h"

static int fired;

static void on_fire(util_timer_t *t)
{
    (void)t;
    fired++;
}

static void timer_init(util_timer_t *t)
{
    util_dlist_init(&t->link);
    t->armed = 0;
    t->fire = on_fire;
}

/* A timer due in the middle of a tick fires when the clock gets there. */
static void test_due_inside_tick(void **state)
{
    util_wheel_t w;
    util_timer_t t;

    (void)state;
    for (uint64_t off = 0; off < 50; off += 7) {
        util_wheel_init(&w, 50, 1000);
        timer_init(&t);
        fired = 0;
        util_timer_arm(&w, &t, 1200 + off);
        for (uint64_t now = 1000; now < 1200 + off; now += 3)
            util_wheel_expire(&w, now);
        assert_int_equal(fired, 0);
        for (uint64_t now = 1200 + off; now < 1200 + off + 50; now++)
            util_wheel_expire(&w, now);
        assert_int_equal(fired, 1);
        assert_int_equal(w.n_armed, 0);
    }
}

/* Beyond the wheel's span, and after a long gap without expiry. */
static void test_far_and_gap(void **state)
{
    util_wheel_t w;
    util_timer_t t;

    (void)state;
    util_wheel_init(&w, 50, 0);
    timer_init(&t);
    fired = 0;
    util_timer_arm(&w, &t, 100000 + 17);
    util_wheel_expire(&w, 60000);
    util_wheel_expire(&w, 100000);
    assert_int_equal(fired, 0);
    util_wheel_expire(&w, 100100);
    assert_int_equal(fired, 1);
}

static void test_cancel_and_rearm(void **state)
{
    util_wheel_t w;
    util_timer_t t;

    (void)state;
    util_wheel_init(&w, 50, 0);
    timer_init(&t);
    fired = 0;
    util_timer_arm(&w, &t, 500);
    util_timer_arm(&w, &t, 900);
    assert_int_equal(w.n_armed, 1);
    util_wheel_expire(&w, 600);
    assert_int_equal(fired, 0);
    util_timer_cancel(&t);
    assert_int_equal(w.n_armed, 0);
    util_wheel_expire(&w, 2000);
    assert_int_equal(fired, 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_due_inside_tick),
        cmocka_unit_test(test_far_and_gap),
        cmocka_unit_test(test_cancel_and_rearm),
    };
    return UNIT_MAIN(argc, argv, tests);
}
