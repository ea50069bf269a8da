#include "unit.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define UNIT_SKIP_STATUS 77

typedef enum { UNIT_PASS, UNIT_FAIL, UNIT_SKIP } unit_result_t;

_Noreturn void unit_skip(const char *why, ...)
{
    va_list ap;

    printf("skipped: ");
    va_start(ap, why);
    vprintf(why, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    _exit(UNIT_SKIP_STATUS);
}

const char *unit_env(const char *name)
{
    return getenv(name);
}

static unsigned case_timeout_s(void)
{
    const char *v = unit_env("TMX_TEST_CASE_TIMEOUT");
    char *end;
    unsigned long s = v != NULL ? strtoul(v, &end, 10) : 0;

    return v != NULL && *v != '\0' && *end == '\0' && s > 0 && s < 86400 ? (unsigned)s : 300;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int selected(const char *name, int argc, char **argv)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], name) == 0)
            return 1;
    }
    return 0;
}

/* Waits for the case's child; kills it when its time is up. */
static unit_result_t case_wait(pid_t pid, const char *name, unsigned limit)
{
    double deadline = now_s() + limit;
    int status;
    pid_t r;

    while ((r = waitpid(pid, &status, WNOHANG)) == 0 || (r < 0 && errno == EINTR)) {
        if (now_s() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            printf("[  TIMEOUT ] %s: still running after %u s (TMX_TEST_CASE_TIMEOUT), killed\n",
                   name, limit);
            return UNIT_FAIL;
        }
        usleep(2000);
    }
    if (r < 0) {
        printf("[  ERROR   ] %s: waitpid: %s\n", name, strerror(errno));
        return UNIT_FAIL;
    }
    if (WIFSIGNALED(status)) {
        printf("[  CRASHED ] %s: killed by signal %d (%s)\n", name, WTERMSIG(status),
               strsignal(WTERMSIG(status)));
        return UNIT_FAIL;
    }
    if (WEXITSTATUS(status) == UNIT_SKIP_STATUS)
        return UNIT_SKIP;
    return WEXITSTATUS(status) == 0 ? UNIT_PASS : UNIT_FAIL;
}

static unit_result_t case_run(const unit_group_t *g, size_t i, unsigned limit)
{
    pid_t pid;

    fflush(NULL);
    if ((pid = fork()) < 0) {
        printf("[  ERROR   ] %s: fork: %s\n", g->tests[i].name, strerror(errno));
        return UNIT_FAIL;
    }
    if (pid == 0) {
        int failed = _cmocka_run_group_tests(g->name[0] ? g->name : g->tests[i].name, &g->tests[i], 1,
                                             g->setup, g->teardown);
        fflush(NULL);
        exit(failed ? 1 : 0);
    }
    return case_wait(pid, g->tests[i].name, limit);
}

static int list_or_check(int argc, char **argv, const unit_group_t *groups, size_t n_groups)
{
    int listing = argc == 2 && strcmp(argv[1], "--list") == 0;

    for (int a = listing ? argc : 1; a < argc; a++) {
        int found = 0;
        for (size_t g = 0; g < n_groups && !found; g++)
            for (size_t i = 0; i < groups[g].n && !found; i++)
                found = strcmp(groups[g].tests[i].name, argv[a]) == 0;
        if (!found) {
            fprintf(stderr, "%s: no case named %s (--list names them)\n", argv[0], argv[a]);
            return 2;
        }
    }
    if (!listing)
        return -1;
    for (size_t g = 0; g < n_groups; g++)
        for (size_t i = 0; i < groups[g].n; i++)
            printf("%s\n", groups[g].tests[i].name);
    return 0;
}

int unit_main(int argc, char **argv, const unit_group_t *groups, size_t n_groups)
{
    unsigned limit = case_timeout_s(), counts[3] = {0};
    int rc = list_or_check(argc, argv, groups, n_groups);

    if (rc >= 0)
        return rc;
    for (size_t g = 0; g < n_groups; g++) {
        for (size_t i = 0; i < groups[g].n; i++) {
            if (selected(groups[g].tests[i].name, argc, argv))
                counts[case_run(&groups[g], i, limit)]++;
        }
    }
    printf("%s: %u passed, %u failed, %u skipped\n", argv[0], counts[UNIT_PASS], counts[UNIT_FAIL],
           counts[UNIT_SKIP]);
    if (counts[UNIT_FAIL] > 0)
        return 1;
    /* skipped as a whole only when no case could run here */
    return counts[UNIT_SKIP] > 0 && counts[UNIT_PASS] == 0 ? UNIT_SKIP_STATUS : 0;
}
