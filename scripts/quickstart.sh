#!/bin/sh
# Installs what is missing, builds the release preset, and runs the main
# job: a local two-process tmx-perf run over shared memory.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
bin=build/release/tools
$bin/tmxrun -n 2 --timeout 300 $bin/tmx-perf -t lat -s 1,8,64,1k,8k,64k,1m
$bin/tmxrun -n 2 --timeout 300 $bin/tmx-perf -t bw -s 8,1k,64k,1m,16m
