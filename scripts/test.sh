#!/bin/sh
# The whole test suite: the normal and the ASan+UBSan builds (fault tests
# across network-namespace hosts need root), ThreadSanitizer
# on the single-process tests and on shm across processes in multi-threaded
# mode, valgrind on the API, udp and pool tests, and a bounded
# libFuzzer run on the wire parsers.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh test
sh scripts/fabtests_build.sh
jobs="$(nproc)"
# Every test runs in both builds, the fault tests too (two minutes of
# lossy traffic under ASan: timing that the release build does not see,
# and the retransmission paths that only loss reaches).
for preset in release asan; do
    echo "== $preset build and tests"
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset" -j "$jobs"
    ctest --preset "$preset" -j 2
done
echo "== ThreadSanitizer (single-process tests, udp in multi-threaded mode, the transport conformance suite)"
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j "$jobs" --target api_test match_test udp_mt_test tl_conf shm_test offload_test rcache_test
ctest --preset tsan -R '^(api_test|match_test|udp_mt_test|tl_conf_.*|shm_test|offload_test|rcache_test)$'
echo "== ThreadSanitizer (shm across processes, multi-threaded contexts)"
cmake --build --preset tsan -j "$jobs" --target mp_test tmxrun
ctest --preset tsan -R '^mp_(threads|[a-z]+_mt|(pingpong|order|probe|lonely|threads|pingpong_write)_offload|pingpong_udp_offload)$'
echo "== valgrind"
for t in api_test udp_test pool_test; do # the API over every transport; udp's sockets and filters
    valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
        "build/release/tests/$t" >/dev/null
done
echo "== fuzzing (${TMX_FUZZ_SECONDS:-60} s)"
sh scripts/fuzz.sh "${TMX_FUZZ_SECONDS:-60}" 2>&1 | tail -n 3
echo "== all tests passed"
