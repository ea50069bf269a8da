#!/bin/sh
# Installs what is missing, builds the release preset, runs the main job.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
exec build/release/tools/tmx-perf match
