#!/bin/bash
# Real MPI applications from Debian over the tmx provider (pml cm, mtl ofi),
# their results checked: HPC Challenge (hpcc: HPL, PTRANS, RandomAccess,
# FFT, STREAM, DGEMM and the ring latency and bandwidth tests, each
# validating its own result) and LAMMPS (lmp: a Lennard-Jones melt whose
# thermodynamic output must be identical, digit for digit, to the same job
# over Open MPI's own ob1 + vader) and the BLACS tester of ScaLAPACK
# (xCbtest: point-to-point, broadcast and combine operations of every type
# over process grids, each result checked, then BLACS_ABORT, which must kill
# the job). Each runs at 4 ranks over shm, over udp, with the offload
# engine on, and over udp with injected faults.
#   usage: run_apps.sh PROVIDER_DIR
# Exits 77 (skipped) when no application is installed (Debian: hpcc,
# lammps, scalapack-mpi-test) or the provider was not built.
set -u
PROV_DIR="$1"
N=4
fails=0
ran=0

[ -e "$PROV_DIR/libtmx-fi.so" ] || { echo "SKIP: the tmx provider was not built"; exit 77; }
HPCC=$(command -v hpcc)
LMP=$(command -v lmp)
BLACS_DIR=/usr/lib/x86_64-linux-gnu/scalapack/openmpi-tests/BLACS
BLACS=""
[ -x "$BLACS_DIR/xCbtest" ] && BLACS="$BLACS_DIR/xCbtest"
if [ -z "$HPCC" ] && [ -z "$LMP" ] && [ -z "$BLACS" ]; then
    echo "SKIP: none of hpcc, lmp and xCbtest is installed (Debian: apt-get install hpcc lammps scalapack-mpi-test)"
    exit 77
fi

export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_orte_base_help_aggregate=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --timeout 300 -n "$N")
TMX=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tmx --mca mtl_base_verbose 1
     -x FI_PROVIDER_PATH="$PROV_DIR")
OB1=(--mca pml ob1 --mca btl self,vader)

DIR="$(mktemp -d "${TMPDIR:-/tmp}/run_apps.XXXXXX")" || exit 1
JOB=""
cleanup() {
    [ -n "$JOB" ] && kill "$JOB" 2>/dev/null && wait "$JOB"
    rm -rf "$DIR"
    return 0
}
trap cleanup EXIT
trap 'exit 1' INT TERM
cd "$DIR" || exit 1

fail() {
    echo "FAIL $1"
    [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 30 "$2"
    fails=$((fails + 1))
}

# job LOG ENV MPIRUN-OPTION... PROGRAM ARG...: one job, in the background so
# that a signal reaches the trap at once; ENV is "NAME=VALUE ..." or "-",
# set for that job only.
job() {
    local log="$1" rc e
    local -a envs=()
    [ "$2" = - ] || read -ra envs <<<"$2"
    shift 2
    for e in "${envs[@]}"; do
        set -- -x "${e%%=*}" "$@"
    done
    (
        for e in "${envs[@]}"; do
            export "${e?}"
        done
        exec timeout -k 5 330 "${MPIRUN[@]}" "$@"
    ) >"$log" 2>&1 &
    JOB=$!
    wait "$JOB"
    rc=$?
    JOB=""
    return "$rc"
}

# A job whose variant injects faults says it did (every rank, at info level).
faults_injected() { # VARIANT LOG
    case $1 in
    *TMX_UDP_FAULTS=*) [ "$(grep -c 'udp: injecting faults' "$2")" -ge "$N" ] ;;
    *) true ;;
    esac
}

# Each rank of a job over the provider says that Open MPI chose it.
used_tmx() {
    [ "$(grep -c 'mtl:ofi:provider: tmx$' "$1")" -eq "$N" ]
}

# udp-faults: udp that loses, repeats, reorders and corrupts datagrams
# (TMX_UDP_FAULTS), which the results must not show.
VARIANTS=("shm:TMX_TRANSPORTS=self,shm" "udp:TMX_TRANSPORTS=self,udp" "offload:TMX_OFFLOAD=1"
          "udp-faults:TMX_TRANSPORTS=self,udp TMX_UDP_FAULTS=drop=0.05,dup=0.02,reorder=0.05,corrupt=0.005 TMX_LOG_LEVEL=info")

# HPC Challenge's input: the HPL section sized for two cores, then the
# section of the other tests (the format of hpcc's _hpccinf.txt).
hpcc_input() {
    cat <<'IN'
HPLinpack benchmark input file
run_apps.sh
HPL.out      output file name (if any)
8            device out (6=stdout,7=stderr,file)
1            # of problems sizes (N)
1000         Ns
1            # of NBs
80           NBs
0            PMAP process mapping (0=Row-,1=Column-major)
1            # of process grids (P x Q)
2            Ps
2            Qs
16.0         threshold
1            # of panel fact
2            PFACTs (0=left, 1=Crout, 2=Right)
1            # of recursive stopping criterium
4            NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
1            # of recursive panel fact.
1            RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
1            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
##### This line (no. 32) is ignored (it serves as a separator). ######
0                               Number of additional problem sizes for PTRANS
1200 10000 30000                values of N
0                               number of additional blocking sizes for PTRANS
40 9 8 13 13 20 16 32 64        values of NB
IN
}

# What hpcc's output must hold: every test ran to its end and validated.
hpcc_check() {
    local out=hpccoutf.txt
    grep -q '^End of HPC Challenge tests' "$out" || { echo "it did not finish"; return 1; }
    grep -q 'FAILED' "$out" && { grep 'FAILED' "$out" | head -n 5; return 1; }
    [ "$(grep -c ' 0 tests completed and failed residual checks' "$out")" -ge 2 ] ||
        { echo "HPL or PTRANS did not pass its residual checks"; return 1; }
    grep -q 'Solution Validates' "$out" || { echo "STREAM did not validate"; return 1; }
    # RandomAccess loses no update at 4 ranks or fewer; above 4 it keeps 4
    # receives posted and, at the end, drops any that matched an update it
    # had not applied yet (MPIRandomAccess.c): ob1 + vader shows errors too
    if grep -q 'Found [1-9][0-9]* errors' "$out"; then
        grep 'Found [1-9][0-9]* errors' "$out" | head -n 5
        return 1
    fi
    grep -q 'Latency-Bandwidth-Benchmark' "$out" || { echo "no latency and bandwidth results"; return 1; }
    return 0
}

if [ -n "$HPCC" ]; then
    for v in "${VARIANTS[@]}"; do
        name="hpcc, $N ranks over tmx (${v%%:*})"
        rm -f hpccoutf.txt
        hpcc_input >hpccinf.txt
        t0=$(date +%s)
        if ! job hpcc.log "${v#*:}" "${TMX[@]}" "$HPCC"; then
            fail "$name: mpirun failed" hpcc.log
        elif ! used_tmx hpcc.log; then
            fail "$name: not every rank used the tmx provider" hpcc.log
        elif ! faults_injected "$v" hpcc.log; then
            fail "$name: not every rank injected faults" hpcc.log
        elif ! why=$(hpcc_check); then
            fail "$name: $why" hpccoutf.txt
        else
            echo "ok   $name ($(($(date +%s) - t0)) s)"
        fi
        ran=$((ran + 1))
    done
fi

# A Lennard-Jones melt: 4000 atoms, 250 steps, thermodynamics every 50.
lmp_input() {
    cat <<'IN'
units           lj
atom_style      atomic
lattice         fcc 0.8442
region          box block 0 10 0 10 0 10
create_box      1 box
create_atoms    1 box
mass            1 1.0
velocity        all create 3.0 87287 loop geom
pair_style      lj/cut 2.5
pair_coeff      1 1 1.0 1.0 2.5
neighbor        0.3 bin
neigh_modify    every 20 delay 0 check no
fix             1 all nve
thermo          50
run             250
IN
}

# The thermodynamic lines of a LAMMPS log: step, temperature, energies, pressure.
thermo() {
    sed -n '/^ *Step /,/^Loop time/p' "$1" | grep -E '^ +[0-9]+ '
}

if [ -n "$LMP" ]; then
    lmp_input >in.melt
    if ! job lmp_ob1.log - "${OB1[@]}" "$LMP" -in in.melt -log log.ob1 -screen none ||
       [ "$(thermo log.ob1 | wc -l)" -ne 6 ]; then
        fail "lammps over ob1 + vader (the reference) did not run" lmp_ob1.log
    else
        for v in "${VARIANTS[@]}"; do
            name="lammps, $N ranks over tmx (${v%%:*})"
            t0=$(date +%s)
            if ! job lmp.log "${v#*:}" "${TMX[@]}" "$LMP" -in in.melt -log log.tmx -screen none; then
                fail "$name: mpirun failed" lmp.log
            elif ! used_tmx lmp.log; then
                fail "$name: not every rank used the tmx provider" lmp.log
            elif ! faults_injected "$v" lmp.log; then
                fail "$name: not every rank injected faults" lmp.log
            elif ! diff <(thermo log.ob1) <(thermo log.tmx) >thermo.diff; then
                fail "$name: thermodynamics differ from ob1 + vader's" thermo.diff
            else
                echo "ok   $name ($(($(date +%s) - t0)) s, thermodynamics as over ob1 + vader)"
            fi
            ran=$((ran + 1))
        done
    fi
fi

# What the BLACS tester's output must hold: every test group's summary
# with no failure, the six auxiliary tests passed (the repeatable-sum test
# skips itself when the sum came out the same without asking for it,
# which depends on the order the contributions arrive in), and the last
# one (BLACS_ABORT) reached, which ends the job with an error by design.
blacs_check() {
    local out=$1 groups bad
    groups=$(grep -cE 'TESTS: +[0-9]+ TESTS;' "$out")
    bad=$(grep -E 'TESTS: +[0-9]+ TESTS;' "$out" | grep -vc ' 0 FAILED\.$')
    [ "$groups" -ge 22 ] || { echo "$groups test groups reported, 22 expected"; return 1; }
    [ "$bad" -eq 0 ] || { grep -E 'TESTS: +[0-9]+ TESTS;' "$out" | grep -v ' 0 FAILED\.$' | head -n 5; return 1; }
    [ "$(grep -cE '^ (PASSED  |SKIPPED REPEATABLE SUM)' "$out")" -ge 6 ] || { echo "an auxiliary test did not pass"; return 1; }
    grep -q '^ FAILED' "$out" && { grep '^ FAILED' "$out" | head -n 5; return 1; }
    grep -q 'The final auxiliary test is for BLACS_ABORT' "$out" || { echo "it did not reach BLACS_ABORT"; return 1; }
    return 0
}

if [ -n "$BLACS" ]; then
    cp "$BLACS_DIR"/*.dat . || fail "the BLACS tester's input files could not be copied"
    for v in "${VARIANTS[@]}"; do
        name="BLACS tester, $N ranks over tmx (${v%%:*})"
        t0=$(date +%s)
        job blacs.log "${v#*:}" "${TMX[@]}" "$BLACS"
        rc=$?
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            fail "$name: timed out" blacs.log
        elif ! used_tmx blacs.log; then
            fail "$name: not every rank used the tmx provider" blacs.log
        elif ! faults_injected "$v" blacs.log; then
            fail "$name: not every rank injected faults" blacs.log
        elif ! why=$(blacs_check blacs.log); then
            fail "$name: $why" blacs.log
        elif [ "$rc" -eq 0 ]; then
            fail "$name: BLACS_ABORT did not end the job with an error" blacs.log
        else
            echo "ok   $name ($(($(date +%s) - t0)) s)"
        fi
        ran=$((ran + 1))
    done
fi

echo "$ran application runs, $fails failed"
[ "$fails" -eq 0 ]
