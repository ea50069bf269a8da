/*
 * The runner of every cmocka suite. With no argument a suite runs all its
 * cases; with case names, only those; --list prints them. Each case runs
 * in a forked child under a time limit, so a case that crashes or hangs
 * is reported by name and the other cases still run. cmocka does the
 * assertions inside the child.
 *
 *   TMX_TEST_CASE_TIMEOUT   seconds a case may take (default 300)
 *
 * A case that cannot run here calls unit_skip(), which says why: the suite
 * exits 77 (ctest's SKIP_RETURN_CODE) when no case failed and none could
 * run, 0 when some passed and the rest were skipped.
 */
#ifndef TMX_TEST_UNIT_H
#define TMX_TEST_UNIT_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

typedef struct unit_group {
    const char *name;
    const struct CMUnitTest *tests;
    size_t n;
    CMFixtureFunction setup, teardown;   /* run around each case, in its child */
} unit_group_t;

/* Runs the groups' selected cases; returns the process's exit status. */
int unit_main(int argc, char **argv, const unit_group_t *groups, size_t n_groups);

/* One group, no group fixtures. */
#define UNIT_MAIN(argc, argv, tests)                                                   \
    unit_main((argc), (argv),                                                          \
              &(const unit_group_t){"", (tests), sizeof(tests) / sizeof((tests)[0]), NULL, NULL}, 1)

/* A variable of the test's environment (TMX_TEST_*), or NULL: tests read
 * their own knobs here, the library through its settings table only. */
const char *unit_env(const char *name);

/* Ends the running case as skipped, saying why (called in the child). */
_Noreturn void unit_skip(const char *why, ...) __attribute__((format(printf, 1, 2)));

#endif
