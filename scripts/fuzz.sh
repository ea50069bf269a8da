#!/bin/sh
# Builds the libFuzzer targets with clang and runs each for a bounded time
# (default 60 s) on a scratch copy of the seed corpus.
set -eu
cd "$(dirname "$0")/.."
secs="${1:-60}"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)" --target fuzz_wire
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp tests/fuzz/corpus/* "$work/"
build/fuzz/tests/fuzz_wire -max_total_time="$secs" -max_len=1024 -rss_limit_mb=2048 "$work"
