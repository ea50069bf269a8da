#!/bin/sh
# Builds and runs the whole test suite in the normal and the ASan+UBSan builds.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
for preset in release asan; do
    echo "== $preset build"
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset" -j "$(nproc)"
    ctest --preset "$preset" -j 2
done
