#!/bin/sh
# Installs what tmx needs to build and test on Debian 12; with "test", also
# what only the tests use (a local Slurm for srun, started by the test
# itself, never as a service).
set -eu
PKGS="build-essential cmake pkg-config libcmocka-dev clang libclang-rt-14-dev valgrind procps iproute2 nftables libfabric-dev libfabric-bin openmpi-bin libopenmpi-dev libpmix-dev autoconf automake libtool"
if [ "${1:-}" = test ]; then PKGS="$PKGS slurmd slurmctld munge"; fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=""
for p in $PKGS; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
