#!/bin/sh
# Builds the libFuzzer targets with clang and runs each for a bounded time
# (default 60 s each) on a scratch copy of the seed corpus.
set -eu
cd "$(dirname "$0")/.."
secs="${1:-60}"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)" --target fuzz_wire fuzz_udp fuzz_shm
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for t in wire udp shm; do mkdir -p "$work/$t"; cp tests/fuzz/corpus_$t/* "$work/$t/"; done
for t in wire udp shm; do
    echo "fuzz_$t: $secs s"
    if ! build/fuzz/tests/fuzz_$t -max_total_time="$secs" -max_len=2048 -rss_limit_mb=2048 \
        "$work/$t" >"$work/$t.log" 2>&1; then
        tail -n 40 "$work/$t.log"
        exit 1
    fi
    grep -E "DONE" "$work/$t.log" || true
done
