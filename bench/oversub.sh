#!/usr/bin/env bash
# bench/oversub.sh - more MPI ranks than cores: Open MPI over tmx next to
# ob1 + vader and pml ucx (issue 12, part 4).
#
# Two programs, each at 4 and 8 ranks confined to cores 0 and 1 (taskset),
# with --mca mpi_yield_when_idle 1 (what Open MPI's own docs advise when
# oversubscribed), in interleaved rounds:
#   halo   bench/mpi/halo.c: LAMMPS's pattern per step: compute, 6 halo
#          exchanges of 32 KiB with the face neighbours of a 3-D
#          decomposition, one allreduce; 500 steps, the compute split over
#          the ranks as LAMMPS splits its 32000 atoms (21.2 ms per step in
#          all, measured with in.lj on this machine);
#   in.lj  LAMMPS's Lennard-Jones benchmark (Debian's lammps, lmp; its
#          bench/in.lj written out here, 32000 atoms, 500 steps), when the
#          package is installed or installable; LAMMPS's own "Loop time".
# over
#   tmx    pml cm, mtl ofi, provider tmx (build/release/fabric/libtmx-fi.so)
#   vader  pml ob1, btl self,vader
#   ucx    pml ucx (when ompi_info lists it)
# Writes results/oversub.md and results/raw/oversub/ (every output, the
# commands, data.tsv). Usage: bench/oversub.sh [-r ROUNDS] [--quick] [-h]
set -euo pipefail

usage() {
    cat <<'EOF'
usage: bench/oversub.sh [-r ROUNDS] [--quick] [--no-install] [--no-build] [-o DIR]
  -r ROUNDS     interleaved rounds (default 3); each runs every program, rank count
                and configuration once, configurations in an order that rotates
  --quick       1 round, 100 steps (a smoke test; writes results/quick/ unless -o)
  --no-install  do not apt-get install missing tools (in.lj is left out without lmp)
  --no-build    use build/release/fabric/libtmx-fi.so as it is
  -o DIR        output folder (default bench/results)
EOF
}

BENCH=oversub
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
bench_args "$@"
bench_init
bench_need "mpirun mpicc ompi_info taskset cmake" openmpi-bin libopenmpi-dev util-linux cmake make gcc
if ! command -v lmp >/dev/null 2>&1 && [ "$INSTALL" = 1 ]; then
    log "installing Debian's lammps (for in.lj)"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq lammps >/dev/null 2>&1 || true
fi
bench_staging

STEPS=500
[ "$QUICK" = 1 ] && STEPS=100
STEP_US=21200    # in.lj's compute per step on one core, split over the ranks
HALO_BYTES=32768 # about in.lj's ghost atoms per face at 4 ranks (1300 x 3 doubles)
RANKS="4 8"

# ------------------------------------------------------------------- build
if [ "$BUILD" = 1 ]; then
    log "building tmx (release)"
    (cd "$ROOT" && cmake --preset release >/dev/null && cmake --build build/release -j2 >"$TMP/build.log" 2>&1) ||
        { tail -20 "$TMP/build.log" >&2; echo "oversub.sh: build failed" >&2; exit 1; }
fi
PROV_SO=$ROOT/build/release/fabric/libtmx-fi.so
[ -f "$PROV_SO" ] || { echo "oversub.sh: $PROV_SO missing" >&2; exit 1; }
mkdir -p "$TMP/fabric"
cp "$PROV_SO" "$TMP/fabric/" # a rebuild by someone else cannot change this run
mpicc -O2 -Wall -Wextra -o "$TMP/halo" "$HERE/mpi/halo.c"
TMX_GIT="$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo "?")"

# LAMMPS's bench/in.lj, with the step count of this run
PROGS="halo"
if command -v lmp >/dev/null 2>&1; then
    PROGS="halo lj"
    cat >"$TMP/in.lj" <<EOF
# 3d Lennard-Jones melt (LAMMPS bench/in.lj)
variable x index 1
variable y index 1
variable z index 1
variable xx equal 20*\$x
variable yy equal 20*\$y
variable zz equal 20*\$z
units lj
atom_style atomic
lattice fcc 0.8442
region box block 0 \${xx} 0 \${yy} 0 \${zz}
create_box 1 box
create_atoms 1 box
mass 1 1.0
velocity all create 1.44 87287 loop geom
pair_style lj/cut 2.5
pair_coeff 1 1 1.0 1.0 2.5
neighbor 0.3 bin
neigh_modify delay 0 every 20 check no
fix 1 all nve
run $STEPS
EOF
    cp "$TMP/in.lj" "$RAWNEW/in.lj"
else
    log "lmp not found: in.lj left out (apt-get install lammps)"
fi

declare -A CONF
CONF[tmx]="-x FI_PROVIDER_PATH=$TMP/fabric --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tmx"
CONF[vader]="--mca pml ob1 --mca btl self,vader"
CONF[ucx]="--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any"
SYSTEMS="tmx vader"
ompi_info 2>/dev/null | grep -q "MCA pml: ucx" && SYSTEMS="tmx vader ucx"

prog_cmd() { # PROG N
    case $1 in
    halo) echo "$TMP/halo -s $STEPS -b $HALO_BYTES -w $((STEP_US / $2))" ;;
    lj) echo "lmp -in $TMP/in.lj -log none -nocite" ;;
    esac
}

# one job; records its seconds (the program's own timing of its steps)
one() { # SYSTEM PROG N
    local sys=$1 prog=$2 n=$3 f="$RAWNEW/r${ROUND}_${1}_${2}_${3}.txt" cmd secs
    # shellcheck disable=SC2086
    cmd="taskset -c 0,1 mpirun --allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 ${CONF[$sys]} -n $n $(prog_cmd "$prog" "$n")"
    printf 'r%s  %s\n' "$ROUND" "$cmd" >>"$RAWNEW/commands.txt"
    quiet "$sys $prog $n"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); cores 0 and 1 busy (%): $(tail -n1 "$TMP/busy.tsv" | cut -f3,4)" >"$f"
    # shellcheck disable=SC2086
    timeout "$TO" $cmd >>"$f" 2>&1 || {
        local rc=$?
        echo "r$ROUND $sys $prog $n: $([ $rc = 124 ] && echo "timed out after $TO s" || echo "exit $rc") (raw/oversub/$(basename "$f"))" >>"$TMP/failures.txt"
        return 0
    }
    case $prog in
    halo) secs=$(grep -m1 '^halo,' "$f" | cut -d, -f6) ;;
    lj) secs=$(grep -m1 '^Loop time of' "$f" | awk '{print $4}') ;;
    esac
    [ -n "$secs" ] && rec "$sys" "$prog" "$n" "$secs"
    log "r$ROUND $prog n=$n $sys: ${secs:-n/a} s"
}

T_START=$(date +%s)
START_DATE=$(date -u '+%F %H:%M UTC')
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for ROUND in $(seq 1 "$ROUNDS"); do
    # rotate the order of the systems from round to round
    read -r -a sys <<<"$SYSTEMS"
    k=$(((ROUND - 1) % ${#sys[@]}))
    order=("${sys[@]:k}" "${sys[@]:0:k}")
    for prog in $PROGS; do
        for n in $RANKS; do
            for s in "${order[@]}"; do one "$s" "$prog" "$n"; done
        done
    done
done
ELAPSED=$(($(date +%s) - T_START))
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
cp "$DATA" "$RAWNEW/data.tsv"

# ------------------------------------------------------------------ report
# median, min, max and every round's value of SYSTEM PROG N
stat() { # SYSTEM PROG N FIELD
    awk -F'\t' -v s="$1" -v p="$2" -v n="$3" -v f="$4" '
        $2 == s && $3 == p && $4 == n { v[c++] = $5; l = l (l == "" ? "" : " / ") $5 }
        END {
            if (c == 0) { print ""; exit }
            for (i = 0; i < c; i++) for (j = i + 1; j < c; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
            m = c % 2 ? v[(c - 1) / 2] : (v[c / 2 - 1] + v[c / 2]) / 2
            if (f == "med") printf "%.2f", m; else if (f == "min") printf "%.2f", v[0];
            else if (f == "max") printf "%.2f", v[c - 1]; else print l
        }' "$DATA"
}
rat() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }' || echo "n/a"; }
label() { case $1 in halo) echo "halo (bench/mpi/halo.c)" ;; lj) echo "LAMMPS in.lj" ;; esac; }

MD=$TMP/oversub.md
{
    echo "# Oversubscription: more MPI ranks than cores"
    echo
    echo "$START_DATE, $ROUNDS interleaved round(s), $STEPS steps, ${ELAPSED} s in all; tmx at $TMX_GIT."
    echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), every job on cores 0 and 1;"
    echo "load average (1, 5, 15 min) $LOAD_START at the start, $LOAD_END at the end"
    echo "(the machine is shared: before each job the script waits, up to 20 s, for cores 0 and 1 to be"
    echo "below 25 % busy; the load and the busy figures it started with are at the top of its raw output)."
    echo "Open MPI $(ompi_info 2>/dev/null | awk '/Open MPI:/ {print $3; exit}'), lammps $(pkgv lammps)."
    echo
    echo "Seconds for the timed steps (the program's own clock: halo's, LAMMPS's \"Loop time\"), median over"
    echo "rounds [min, max], and tmx's median over the others'. Target: tmx at most 1.1x vader at 4 ranks."
    echo
    echo "| program | ranks | tmx | vader | ucx | tmx / vader | tmx / ucx | every round (tmx; vader; ucx) |"
    echo "|---|---|---|---|---|---|---|---|"
    for prog in $PROGS; do
        for n in $RANKS; do
            t=$(stat tmx "$prog" "$n" med) v=$(stat vader "$prog" "$n" med) u=$(stat ucx "$prog" "$n" med)
            cell() { [ -n "$(stat "$1" "$prog" "$n" med)" ] && echo "$(stat "$1" "$prog" "$n" med) [$(stat "$1" "$prog" "$n" min), $(stat "$1" "$prog" "$n" max)]" || echo "n/a"; }
            echo "| $(label "$prog") | $n | $(cell tmx) | $(cell vader) | $(cell ucx) | $(rat "$t" "$v") | $(rat "$t" "$u") | $(stat tmx "$prog" "$n" list); $(stat vader "$prog" "$n" list); $(stat ucx "$prog" "$n" list) |"
        done
    done
    echo
    echo "## Commands"
    echo
    echo '```'
    echo "halo: $(prog_cmd halo 4)  (at 8 ranks: -w $((STEP_US / 8)))"
    [ -f "$TMP/in.lj" ] && echo "lj:   $(prog_cmd lj 4)  (in.lj in raw/oversub/)"
    echo "under: taskset -c 0,1 mpirun --allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 CONF -n N"
    for s in $SYSTEMS; do echo "$s: ${CONF[$s]//$TMP\/fabric/build\/release\/fabric}"; done
    echo '```'
    if [ -s "$TMP/failures.txt" ]; then
        echo
        echo "## Problems seen in this run"
        echo
        sed 's/^/- /' "$TMP/failures.txt"
    fi
} >"$MD"
sed -i "s#$TMP/#TMP/#g" "$MD" "$RAWNEW/commands.txt"
cp "$MD" "$OUT/$BENCH.md"
rm -rf "$OUT/raw/$BENCH"
mv "$RAWNEW" "$OUT/raw/$BENCH"
RAWNEW=""
log "done in ${ELAPSED} s: $OUT/$BENCH.md"
cat "$OUT/$BENCH.md"
