/* The tests of tmx-perf. Each takes tmx-perf's arguments and returns the process exit
 * status: 0 on success, 1 when a measurement fails, 2 on bad usage.
 * Results go to stdout, diagnostics to stderr. */
#ifndef TMX_TOOLS_PERF_H
#define TMX_TOOLS_PERF_H

/* Point-to-point tests between the two ranks of a tmxrun job: latency,
 * bandwidth, bidirectional bandwidth, message rate. */
int perf_p2p_main(int argc, char **argv);

#endif
