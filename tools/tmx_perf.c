/* tmx-perf: performance tests, one subcommand each. */
#include <stdio.h>
#include <string.h>

#include "perf.h"

typedef struct perf_cmd {
    const char *name;
    const char *help;
    int (*main)(int argc, char **argv);
} perf_cmd_t;

static const perf_cmd_t perf_cmds[] = {
    {"match", "matching engine: ns per match against queue depth", perf_match_main},
};

#define PERF_N_CMDS (sizeof(perf_cmds) / sizeof(perf_cmds[0]))

static int usage(void)
{
    fprintf(stderr, "usage: tmxrun -n 2 tmx-perf [-t lat|bw|bibw|rate] [OPTIONS]  (point to point)\n"
                    "       tmx-perf SUBCOMMAND [OPTIONS]\n\nsubcommands:\n");
    for (size_t i = 0; i < PERF_N_CMDS; i++)
        fprintf(stderr, "  %-8s %s\n", perf_cmds[i].name, perf_cmds[i].help);
    fprintf(stderr, "\n'tmx-perf SUBCOMMAND --help' lists a subcommand's options;\n"
                    "'tmx-perf -t lat --help' those of the point-to-point tests.\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (argv[1][0] == '-' && strcmp(argv[1], "--help") != 0 && strcmp(argv[1], "-h") != 0))
        return perf_p2p_main(argc, argv);
    for (size_t i = 0; i < PERF_N_CMDS; i++) {
        if (strcmp(argv[1], perf_cmds[i].name) == 0)
            return perf_cmds[i].main(argc - 1, argv + 1);
    }
    if (strcmp(argv[1], "--help") != 0 && strcmp(argv[1], "-h") != 0)
        fprintf(stderr, "tmx-perf: unknown subcommand '%s'\n", argv[1]);
    return usage();
}
