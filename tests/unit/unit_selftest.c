/* A suite whose cases misbehave on purpose: the runner must name the case
 * that crashed, the one that hung and the one that failed, and still run
 * the one that passes (tests/unit/unit_selftest.sh checks its output). */
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <unistd.h>
#include <cmocka.h>

#include "unit.h"

static void passes(void **state)
{
    assert_int_equal(1 + 1, 2);
}

static void crashes(void **state)
{
    raise(SIGSEGV);
}

/* Killed outright, as by the OOM killer or a wild write into cmocka's own
 * state: no handler of cmocka's runs, the runner alone can name it. */
static void dies(void **state)
{
    raise(SIGKILL);
}

static void hangs(void **state)
{
    for (;;)
        pause();
}

static void fails(void **state)
{
    assert_int_equal(1 + 1, 3);
}

static void skips(void **state)
{
    unit_skip("on purpose");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crashes),
        cmocka_unit_test(dies),
        cmocka_unit_test(hangs),
        cmocka_unit_test(fails),
        cmocka_unit_test(skips),
        cmocka_unit_test(passes),
    };

    return UNIT_MAIN(argc, argv, tests);
}
