/* Subcommands of tmx-perf. Each takes the arguments after "tmx-perf", so
 * argv[0] is the subcommand's own name, and returns the process exit
 * status: 0 on success, 1 when a measurement fails, 2 on bad usage.
 * Results go to stdout, diagnostics to stderr. */
#ifndef TMX_TOOLS_PERF_H
#define TMX_TOOLS_PERF_H

/* The matching engine alone, in this process: nanoseconds per match against
 * queue depth for each wildcard pattern, beside a linear-list baseline. */
int perf_match_main(int argc, char **argv);

/* Point-to-point tests between the two ranks of a tmxrun job: latency,
 * bandwidth, bidirectional bandwidth, message rate. */
int perf_p2p_main(int argc, char **argv);

#endif
