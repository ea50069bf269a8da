#!/bin/bash
# Runs MPI test programs under Open MPI's mpirun, once per rank count.
#   usage: run_mpi.sh MODE PROVIDER_DIR PROGRAM[:PROGRAM...] N [N...]
#   local  N ranks on this host, pml cm / mtl ofi over the tmx provider
#   hosts  N ranks across two test hosts (network namespaces, root only),
#          mapped by node, over the tmx provider (udp between the hosts)
#   ob1    N ranks on this host over Open MPI's own shared memory (no
#          provider): a check of the program itself
# Over the provider, each rank must report that Open MPI chose the tmx
# domain (mtl_base_verbose); across hosts, each host must have carried
# ranks and sent UDP datagrams. Exits 77 (skipped) when the provider was not
# built, or for hosts without root. Prints one line per case and job; on a
# failure, the job's output. MPI_TEST_CASES (words) runs only those cases.
set -u
MODE="$1"
PROV_DIR="$2"
PROG="$3"
shift 3
HERE="$(cd "$(dirname "$0")" && pwd)"
JOB_TIMEOUT=150             # mpirun's own limit per job, in seconds
fails=0

skip() {
    echo "SKIP: $*"
    exit 77
}

IFS=: read -r -a PROGS <<<"$PROG"
for p in "${PROGS[@]}"; do
    [ -x "$p" ] || { echo "FAIL: $p not built"; exit 1; }
done
if [ "$MODE" != ob1 ] && [ ! -e "$PROV_DIR/libtmx-fi.so" ]; then
    skip "the tmx provider $PROV_DIR/libtmx-fi.so was not built"
fi

# Quiet, and fit for a small machine: any number of ranks per core, ranks
# yield when idle, no binding, no help aggregation noise from interfaces.
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_orte_base_help_aggregate=1
export OMPI_MCA_mpi_warn_on_fork=0
# Open MPI is not leak-free: in sanitizer builds (the program carries the
# runtime) leaks are not reported.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}detect_leaks=0"

MPIRUN=(mpirun --allow-run-as-root --oversubscribe --timeout "$JOB_TIMEOUT"
        -x ASAN_OPTIONS -x MPI_TEST_VERBOSE=1)
TMX=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tmx --mca mtl_base_verbose 1
     -x FI_PROVIDER_PATH="$PROV_DIR")
OB1=(--mca pml ob1 --mca btl "self,vader")

LOG="$(mktemp "${TMPDIR:-/tmp}/run_mpi.XXXXXX")" || exit 1
JOB=""
cleanup() {
    [ -n "$JOB" ] && kill "$JOB" 2>/dev/null && wait "$JOB"
    rm -f "$LOG" "${HOSTFILE:-}"
    [ -n "${FAULT_BR:-}" ] && fault_hosts_down
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# check NAME N OPTION...: one mpirun job of N ranks per program (each
# prints "NAME passed" when all its checks held).
check() {
    local name="$1" n="$2" p
    shift 2
    for p in "${PROGS[@]}"; do
        check_one "$(basename "$p"): $name" "$n" "$p" "$@" || return 1
    done
}

check_one() {
    local name="$1" n="$2" prog="$3" t0 rc ms got_tmx
    shift 3
    t0=$(date +%s%N)
    # In the background, so that a signal reaches the traps at once.
    # shellcheck disable=SC2086 # MPI_TEST_CASES is a list of words
    timeout -k 5 $((JOB_TIMEOUT + 20)) "${MPIRUN[@]}" -n "$n" "$@" "$prog" ${MPI_TEST_CASES:-} \
        >"$LOG" 2>&1 &
    JOB=$!
    wait "$JOB"
    rc=$?
    JOB=""
    ms=$((($(date +%s%N) - t0) / 1000000))
    grep '^mpi_test ok' "$LOG" | sed "s/^/  /"
    if [ "$rc" -ne 0 ]; then
        echo "FAIL $name: mpirun exit $rc after $ms ms; its output:"
        grep -v 'mtl:ofi:provider' "$LOG" | tail -n 40
        fails=$((fails + 1))
        return 1
    fi
    if ! grep -q "^$(basename "$prog") passed" "$LOG"; then
        echo "FAIL $name: mpirun exit 0 but the program did not finish; its output:"
        tail -n 40 "$LOG"
        fails=$((fails + 1))
        return 1
    fi
    if [ "$MODE" != ob1 ]; then
        # Each rank prints which domain the mtl chose: the provider's.
        got_tmx=$(grep -c 'mtl:ofi:provider: tmx$' "$LOG")
        if [ "$got_tmx" -ne "$n" ]; then
            echo "FAIL $name: $got_tmx of $n ranks report the tmx provider; their lines:"
            grep 'mtl:ofi:provider' "$LOG" | head -n 10
            fails=$((fails + 1))
            return 1
        fi
    fi
    echo "ok   $name ($ms ms)"
    return 0
}

# The hosts each rank reported, one per line, sorted.
rank_hosts() {
    sed -n 's/^mpi_[a-z_]* rank [0-9]*\/[0-9]* on \(.*\)$/\1/p' "$LOG" | sort -u
}

run_local() {
    local n
    for n in "$@"; do
        check "$n ranks over tmx on this host" "$n" "${TMX[@]}"
    done
}

run_ob1() {
    local n
    for n in "$@"; do
        check "$n ranks over ob1/vader (no provider)" "$n" "${OB1[@]}"
    done
}

run_hosts() {
    local n h sent
    if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
        skip "MPI across test hosts needs root and network namespaces"
    fi
    command -v unshare >/dev/null || skip "unshare (util-linux) not found"
    # shellcheck disable=SC2034 # read by hosts.sh
    FAULT_PREFIX="tmxm$$"
    # shellcheck source=tests/fault/hosts.sh
    . "$HERE/../fault/hosts.sh" || exit 1
    fault_hosts_up 2 || { echo "FAIL: cannot make test hosts"; exit 1; }
    IFS=, read -r -a HOSTS <<<"$FAULT_HOSTS"
    HOSTFILE="$(mktemp "${TMPDIR:-/tmp}/run_mpi_hosts.XXXXXX")" || exit 1
    for h in "${HOSTS[@]}"; do echo "$h slots=8"; done >"$HOSTFILE"
    # Counters of the UDP datagrams each host sends (nothing dropped).
    local counted=1
    for h in "${HOSTS[@]}"; do fault_nft_drop "$h" 0 2>/dev/null || counted=0; done

    for n in "$@"; do
        check "$n ranks over tmx across 2 hosts" "$n" "${TMX[@]}" --hostfile "$HOSTFILE" \
            --map-by node --mca plm_rsh_agent "$HERE/netns_agent.sh" \
            --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include "$FAULT_NET.0/24" || continue
        if [ "$(rank_hosts | tr '\n' ,)" != "${HOSTS[0]},${HOSTS[1]}," ]; then
            echo "FAIL $n ranks across 2 hosts: ranks ran on: $(rank_hosts | tr '\n' ' ')"
            fails=$((fails + 1))
        fi
    done
    if [ "$counted" -eq 1 ]; then
        for h in "${HOSTS[@]}"; do
            sent=$(fault_nft_counts "$h" | cut -d' ' -f1)
            if [ "${sent:-0}" -lt 100 ]; then
                echo "FAIL host $h sent ${sent:-0} UDP datagrams: tmx did not use udp between hosts"
                fails=$((fails + 1))
            else
                echo "ok   host $h sent $sent UDP datagrams"
            fi
        done
    fi
    for h in "${HOSTS[@]}"; do
        if [ -n "$(ip netns pids "$h" 2>/dev/null)" ]; then
            echo "FAIL processes left in $h"
            fails=$((fails + 1))
        fi
    done
}

case "$MODE" in
local) run_local "$@" ;;
ob1) run_ob1 "$@" ;;
hosts) run_hosts "$@" ;;
*) echo "usage: $0 local|hosts|ob1 PROVIDER_DIR PROGRAM[:PROGRAM...] N [N...]" >&2; exit 2 ;;
esac
[ "$fails" -eq 0 ]
