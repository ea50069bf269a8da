#!/bin/bash
# Multi-process cases run by a launcher that speaks PMIx instead of tmxrun:
# Open MPI's mpirun (mpirun), or Slurm's srun --mpi=pmix (srun). The
# native program joins its job through libpmix (src/boot/pmix.c).
#   usage: pmix_test.sh mpirun|srun MP_TEST
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
srun)
    if ! command -v srun >/dev/null || ! srun --mpi=list 2>/dev/null | grep -q pmix; then
        echo "pmix_test: SKIPPED: no srun with PMIx here: Debian 12's slurm-wlm is not installed by" \
             ".ci/run, and a Slurm controller, node daemon and munge key would have to be set up" \
             "as root for this one test; the PMIx path srun would take is the one mpirun takes"
        exit 77
    fi
    run() { timeout 150 srun --mpi=pmix -n "$1" "$mp_test" "$2"; }
    ;;
*)
    echo "usage: pmix_test.sh mpirun|srun MP_TEST" >&2
    exit 2
    ;;
esac
rc=0
for c in "2 pingpong" "2 order" "2 truncate" "2 probe" "8 anysource" "4 alltoall" "2 threads"; do
    set -- $c
    out=$(run "$1" "$2" 2>&1)
    st=$?
    if [ $st -ne 0 ] || ! grep -q "mp_test $2: ok" <<<"$out"; then
        echo "pmix_test: $2 on $1 ranks under $launcher failed (exit $st):"
        tail -n 20 <<<"$out"
        rc=1
    else
        grep "mp_test $2: ok" <<<"$out"
    fi
done
exit $rc
