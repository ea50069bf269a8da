#!/bin/sh
# Installs what tmx needs to build and test on Debian 12; with "test", also
# what only the tests use (a local Slurm for srun, started by the test
# itself, never as a service; MPI applications the tests run over the
# provider, without what Debian only recommends with them).
set -eu
PKGS="build-essential cmake pkg-config libcmocka-dev clang libclang-rt-14-dev valgrind procps iproute2 nftables libfabric-dev libfabric-bin openmpi-bin libopenmpi-dev libpmix-dev autoconf automake libtool"
APPS=""
if [ "${1:-}" = test ]; then
    PKGS="$PKGS slurmd slurmctld munge"
    APPS="hpcc lammps scalapack-mpi-test"
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=""
for p in $PKGS; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
apps=""
for p in $APPS; do
    dpkg -s "$p" >/dev/null 2>&1 || apps="$apps $p"
done
if [ -n "$missing$apps" ]; then
    $SUDO apt-get update -qq
fi
if [ -n "$missing" ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
if [ -n "$apps" ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $apps
fi
