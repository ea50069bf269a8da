/* tmx-perf: point-to-point performance between the two ranks of a tmxrun
 * job (perf_p2p.c). The matching engine's own benchmark is a test-side
 * program (tests/bench/perf_match.c): it measures internals, which the
 * installed tools do not see. */
#include "perf.h"

int main(int argc, char **argv)
{
    return perf_p2p_main(argc, argv);
}
