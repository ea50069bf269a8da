#!/bin/bash
# Runs MPI test programs under Open MPI's mpirun, once per rank count.
#   usage: run_mpi.sh MODE PROVIDER_DIR PROGRAM[:PROGRAM...] N [N...]
#   local  N ranks on this host, pml cm / mtl ofi over the tmx provider
#   hosts  N ranks across MPI_TEST_HOSTS test hosts (network namespaces,
#          root only; 2 unless set), mapped by node, over the tmx provider
#          (udp between the hosts)
#   tcp    as hosts, over Open MPI's own ob1 with btl tcp between the hosts
#          (no provider): the same job for comparison
#   ob1    N ranks on this host over Open MPI's own shared memory (no
#          provider): a check of the program itself
# Over the provider, each rank must report that Open MPI chose the tmx
# domain (mtl_base_verbose); across hosts, each host must have carried
# ranks and sent UDP datagrams. Exits 77 (skipped) when the provider was not
# built, or for hosts without root. Prints one line per case and job; on a
# failure, the job's output. MPI_TEST_CASES (words) runs only those cases;
# MPI_TEST_SECONDS sets the program's watchdog (see mpi_test.c) and
# MPI_TEST_JOB_SECONDS mpirun's limit on a job; by default both grow with
# the square of the ranks beyond 16 (see job_limits).
set -u
MODE="$1"
PROV_DIR="$2"
PROG="$3"
shift 3
HERE="$(cd "$(dirname "$0")" && pwd)"
JOB_TIMEOUT=150             # mpirun's own limit per job of 16 ranks or less, in seconds
fails=0

skip() {
    echo "SKIP: $*"
    exit 77
}

IFS=: read -r -a PROGS <<<"$PROG"
for p in "${PROGS[@]}"; do
    [ -x "$p" ] || { echo "FAIL: $p not built"; exit 1; }
done
if [ "$MODE" != ob1 ] && [ "$MODE" != tcp ] && [ ! -e "$PROV_DIR/libtmx-fi.so" ]; then
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

MPIRUN=(mpirun --allow-run-as-root --oversubscribe -x ASAN_OPTIONS -x MPI_TEST_VERBOSE=1
        -x MPI_TEST_SECONDS)
TMX=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tmx --mca mtl_base_verbose 1
     -x FI_PROVIDER_PATH="$PROV_DIR")
# The offload engine's settings and the transports reach the ranks when the test sets them.
for v in TMX_OFFLOAD TMX_OFFLOAD_MIN TMX_OFFLOAD_TAGS TMX_TRANSPORTS; do
    [ -n "${!v:-}" ] && TMX+=(-x "$v")
done
OB1=(--mca pml ob1 --mca btl "self,vader")
OB1_TCP=(--mca pml ob1 --mca btl "self,vader,tcp")

LOG="$(mktemp "${TMPDIR:-/tmp}/run_mpi.XXXXXX")" || exit 1
JOB=""
cleanup() {
    [ -n "$JOB" ] && kill "$JOB" 2>/dev/null && wait "$JOB"
    rm -f "$LOG" "${HOSTFILE:-}"
    [ -n "${FAULT_BR:-}" ] && fault_hosts_down
    # Open MPI names its shared-memory segments after the host: those of a
    # job killed on the test hosts would stay.
    [ -n "${FAULT_PREFIX:-}" ] && rm -f /dev/shm/vader_segment."$FAULT_PREFIX"-*
    return 0
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# job_limits N: the program's watchdog (MPI_TEST_SECONDS) and mpirun's
# limit (job) for N ranks. Open MPI's start of a job grows with the square
# of its ranks when they outnumber the cores: each rank polls every 100 us
# in MPI_Init while the daemons exchange the addresses (128 ranks on 2
# cores: 96 to 260 s over tmx, 309 s over ob1/tcp), so beyond 16 ranks both grow.
# MPI_TEST_SLOW multiplies them (sanitized ranks: 64 of them took 94 s in one
# run and more than 188 s in another, the machine being slower then).
job_limits() {
    local n="$1" secs=60
    [ "$n" -gt 16 ] && secs=$(((60 + n * n / 32) * ${MPI_TEST_SLOW:-1}))
    export MPI_TEST_SECONDS="${MPI_TEST_SECONDS_SET:-$secs}"
    job="${MPI_TEST_JOB_SECONDS:-$JOB_TIMEOUT}"
    if [ -z "${MPI_TEST_JOB_SECONDS:-}" ] && [ "$n" -gt 16 ]; then
        job=$((JOB_TIMEOUT + 2 * MPI_TEST_SECONDS))
    fi
}
MPI_TEST_SECONDS_SET="${MPI_TEST_SECONDS:-}"

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
    local name="$1" n="$2" prog="$3" t0 rc ms got_tmx job
    shift 3
    job_limits "$n"
    t0=$(date +%s%N)
    # In the background, so that a signal reaches the traps at once.
    # shellcheck disable=SC2086 # MPI_TEST_CASES is a list of words
    timeout -k 5 $((job + 20)) "${MPIRUN[@]}" --timeout "$job" -n "$n" "$@" "$prog" ${MPI_TEST_CASES:-} \
        >"$LOG" 2>&1 &
    JOB=$!
    wait "$JOB"
    rc=$?
    JOB=""
    ms=$((($(date +%s%N) - t0) / 1000000))
    grep '^mpi_test ok' "$LOG" | sed "s/^/  /"
    sed -n 's/^mpi_test rank .*MPI_Init \([0-9]*\) ms$/\1/p' "$LOG" | sort -n |
        awk '{ v[NR] = $1 } END { if (NR) printf "  MPI_Init of %d ranks: %d ms to %d ms\n", NR, v[1], v[NR] }'
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
    if [ "$MODE" != ob1 ] && [ "$MODE" != tcp ]; then
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
    sed -n 's/^mpi_[a-z_]* rank [0-9]*\/[0-9]* on \([^,]*\).*$/\1/p' "$LOG" | sort -u
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
    local nh="${MPI_TEST_HOSTS:-2}"
    fault_hosts_up "$nh" || { echo "FAIL: cannot make test hosts"; exit 1; }
    IFS=, read -r -a HOSTS <<<"$FAULT_HOSTS"
    HOSTFILE="$(mktemp "${TMPDIR:-/tmp}/run_mpi_hosts.XXXXXX")" || exit 1
    for h in "${HOSTS[@]}"; do echo "$h slots=16"; done >"$HOSTFILE"
    # Counters of the UDP datagrams each host sends (nothing dropped).
    local counted=1
    for h in "${HOSTS[@]}"; do fault_nft_drop "$h" 0 2>/dev/null || counted=0; done

    local via=("${TMX[@]}") name=tmx
    if [ "$MODE" = tcp ]; then
        via=("${OB1_TCP[@]}" --mca btl_tcp_if_include "$FAULT_NET.0/24")
        name="ob1/tcp"
        counted=0
    fi
    for n in "$@"; do
        check "$n ranks over $name across $nh hosts" "$n" "${via[@]}" --hostfile "$HOSTFILE" \
            --map-by node --mca plm_rsh_agent "$HERE/netns_agent.sh" \
            --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include "$FAULT_NET.0/24" || continue
        if [ "$(rank_hosts | tr '\n' ,)" != "$(printf '%s\n' "${HOSTS[@]}" | sort | tr '\n' ,)" ]; then
            echo "FAIL $n ranks across $nh hosts: ranks ran on: $(rank_hosts | tr '\n' ' ')"
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
hosts | tcp) run_hosts "$@" ;;
*) echo "usage: $0 local|hosts|tcp|ob1 PROVIDER_DIR PROGRAM[:PROGRAM...] N [N...]" >&2; exit 2 ;;
esac
[ "$fails" -eq 0 ]
