#!/bin/bash
# Multi-process cases run by a launcher that speaks PMIx instead of tmxrun:
# Open MPI's mpirun on this host (mpirun) or across two test hosts made of
# network namespaces (mpirun-hosts, root only: udp between them), or
# Slurm's srun --mpi=pmix (srun). The native program joins its job
# through libpmix (src/boot/pmix.c).
#   usage: pmix_test.sh mpirun|mpirun-hosts|srun MP_TEST
# Exits 77, saying why, when the launcher is missing or tmx was built
# without libpmix.
set -u
launcher="$1"
mp_test="$2"
here="$(cd "$(dirname "$0")" && pwd)"
# In a sanitizer build, LeakSanitizer must not count what libpmix keeps.
export LSAN_OPTIONS="suppressions=$here/lsan_pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
if ! ldd "$mp_test" | grep -q libpmix; then
    echo "pmix_test: SKIPPED: tmx was built without libpmix (install libpmix-dev)"
    exit 77
fi
case "$launcher" in
mpirun)
    command -v mpirun >/dev/null || { echo "pmix_test: SKIPPED: no mpirun (openmpi-bin)"; exit 77; }
    run() { # ranks case
        timeout 150 mpirun --allow-run-as-root --oversubscribe --bind-to none -x LSAN_OPTIONS -n "$1" \
            "$mp_test" "$2"
    }
    ;;
mpirun-hosts)
    command -v mpirun >/dev/null || { echo "pmix_test: SKIPPED: no mpirun (openmpi-bin)"; exit 77; }
    if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1 || ! command -v unshare >/dev/null; then
        echo "pmix_test: SKIPPED: test hosts need root, network namespaces and unshare"
        exit 77
    fi
    # shellcheck disable=SC2034 # read by hosts.sh
    FAULT_PREFIX="tmxp$$"
    # shellcheck source=tests/fault/hosts.sh
    . "$here/fault/hosts.sh" || exit 1
    hostfile="$(mktemp /tmp/tmx-pmix-hosts.XXXXXX)"
    trap 'rm -f "$hostfile"; [ -n "${FAULT_BR:-}" ] && fault_hosts_down' EXIT
    fault_hosts_up 2 || { echo "pmix_test: FAIL: cannot make test hosts"; exit 1; }
    IFS=, read -r -a hosts <<<"$FAULT_HOSTS"
    for h in "${hosts[@]}"; do echo "$h slots=8"; done >"$hostfile"
    for h in "${hosts[@]}"; do fault_nft_drop "$h" 0; done # counts what each sends
    run() {
        timeout 150 mpirun --allow-run-as-root --oversubscribe --bind-to none --hostfile "$hostfile" \
            --map-by node --mca plm_rsh_agent "$here/mpi/netns_agent.sh" --mca plm_rsh_no_tree_spawn 1 \
            --mca oob_tcp_if_include "$FAULT_NET.0/24" -x LSAN_OPTIONS -x TMX_HOST=test-host -n "$1" \
            "$mp_test" "$2" # TMX_HOST: mp_test expects no shm between the ranks, as under tmxrun --hosts
    }
    ;;
srun)
    for t in srun slurmctld slurmd munged sinfo; do
        command -v "$t" >/dev/null || {
            echo "pmix_test: SKIPPED: no $t (Debian's slurmd, slurmctld and munge; .ci/run installs them)"
            exit 77
        }
    done
    [ "$(id -u)" -eq 0 ] || { echo "pmix_test: SKIPPED: a local Slurm needs root"; exit 77; }
    # A Slurm of our own on this host: munged with a fresh key, slurmctld
    # and slurmd with a configuration in a scratch folder, on ports of
    # their own; all of it stopped and removed on exit, whatever happens.
    dir="$(mktemp -d /tmp/tmx-slurm.XXXXXX)"
    # the daemons run in the foreground as our children, so that we reap them
    pids=()
    stop_slurm() {
        [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
        for _ in $(seq 20); do
            kill -0 "${pids[@]}" 2>/dev/null || break
            sleep 0.1
        done
        [ ${#pids[@]} -gt 0 ] && kill -9 "${pids[@]}" 2>/dev/null
        wait 2>/dev/null
        rm -rf "$dir"
    }
    trap stop_slurm EXIT
    mkdir -p "$dir/state" "$dir/spool"
    head -c 1024 /dev/urandom >"$dir/munge.key"
    chmod 400 "$dir/munge.key"
    munged -F -f --key-file="$dir/munge.key" -S "$dir/munge.sock" --log-file="$dir/munged.log" \
        --pid-file="$dir/munged.pid" --seed-file="$dir/munge.seed" &
    pids+=($!)
    for _ in $(seq 50); do
        [ -S "$dir/munge.sock" ] && break
        sleep 0.1
    done
    [ -S "$dir/munge.sock" ] || { echo "pmix_test: FAIL: munged did not start"; exit 1; }
    host="$(hostname -s)"
    port=$((20000 + $$ % 20000))
    cat >"$dir/slurm.conf" <<CONF
ClusterName=tmxtest
SlurmctldHost=$host
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=tmxtest Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
    # the PMIx plugin's per-step directories in the scratch directory, not
    # /tmp, where a step that was killed leaves one that a later Slurm's
    # step of the same number cannot create
    mkdir -p "$dir/pmix"
    echo "PMIxCliTmpDirBase=$dir/pmix" >"$dir/mpi.conf"
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -D -i >/dev/null 2>&1 &
    pids+=($!)
    slurmd -D >/dev/null 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do
        sinfo -h -o %t 2>/dev/null | grep -q idle && break
        sleep 0.2
    done
    if ! sinfo -h -o %t 2>/dev/null | grep -q idle; then
        echo "pmix_test: FAIL: the local Slurm node never came up:"
        tail -n 20 "$dir/slurmctld.log" "$dir/slurmd.log"
        exit 1
    fi
    srun --mpi=list 2>&1 | grep -q pmix || { echo "pmix_test: SKIPPED: this Slurm has no PMIx plugin"; exit 77; }
    run() { timeout 150 srun --mpi=pmix --overcommit -n "$1" "$mp_test" "$2"; }
    ;;
*)
    echo "usage: pmix_test.sh mpirun|mpirun-hosts|srun MP_TEST" >&2
    exit 2
    ;;
esac
rc=0
# verdict WHAT STATUS PATTERN: a job (its output in $out) passed when it
# exited 0 and printed PATTERN.
verdict() {
    if [ "$2" -ne 0 ] || ! grep -q "$3" <<<"$out"; then
        echo "pmix_test: $1 failed (exit $2):"
        tail -n 20 <<<"$out"
        rc=1
    else
        grep "$3" <<<"$out"
    fi
}
for c in "2 pingpong" "2 order" "2 truncate" "2 probe" "8 anysource" "4 alltoall" "2 threads" "4 twoctx"; do
    set -- $c
    out=$(run "$1" "$2" 2>&1)
    verdict "$2 on $1 ranks under $launcher" $? "mp_test $2: ok"
done
# Launchers nested either way: the ranks join the nearer launcher's job
# (mpirun started by a tmxrun rank: mpirun's; tmxrun started by mpirun:
# tmxrun's), never the outer one's as rank 0 of 1.
tmxrun="$(dirname "$mp_test")/../tools/tmxrun"
if [ "$launcher" = mpirun ] && [ -x "$tmxrun" ]; then
    for nest in "tmxrun mpirun" "mpirun tmxrun"; do
        if [ "$nest" = "tmxrun mpirun" ]; then
            out=$(timeout 150 "$tmxrun" -n 1 --timeout 120 mpirun --allow-run-as-root --oversubscribe \
                --bind-to none -x LSAN_OPTIONS -n 2 "$mp_test" pingpong 2>&1)
        else
            out=$(timeout 150 mpirun --allow-run-as-root --bind-to none -x LSAN_OPTIONS -n 1 \
                "$tmxrun" -n 2 --timeout 120 "$mp_test" pingpong 2>&1)
        fi
        verdict "pingpong under $nest (the inner launcher's job of 2)" $? "mp_test pingpong: ok, 2 ranks"
    done
fi
if [ "$launcher" = mpirun-hosts ]; then
    for h in "${hosts[@]}"; do
        sent=$(fault_nft_counts "$h" | cut -d' ' -f1)
        if [ "${sent:-0}" -lt 100 ]; then
            echo "pmix_test: FAIL: host $h sent ${sent:-0} UDP datagrams: the ranks did not talk over udp"
            rc=1
        else
            echo "pmix_test: host $h sent $sent UDP datagrams"
        fi
        if [ -n "$(ip netns pids "$h" 2>/dev/null)" ]; then
            echo "pmix_test: FAIL: processes left in $h"
            rc=1
        fi
    done
fi
exit $rc
