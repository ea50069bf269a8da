#!/usr/bin/env bash
# bench/stalls.sh - how long the same Open MPI job takes, run after run,
# with two builds of the provider side by side: the jobs of a build that
# stalls (the offload engine's looks once made the scheduler starve one
# test host's ranks for seconds to minutes) show as a long tail.
#
# Each round runs tests/mpi/run_mpi.sh hosts PROGRAM RANKS once per
# build, interleaved (the order reversed every other round), with
# TMX_OFFLOAD=1 (or the value of TMX_OFFLOAD), and records the job's wall
# time and exit status. Needs root (network namespaces), Open MPI and the
# builds' providers.
#   usage: bench/stalls.sh [-r ROUNDS] [-p PROGRAM] [-n RANKS] [-o FILE] NAME=PROVIDER_DIR...
# Prints one line per job and a table per build: median, 90th percentile
# and longest time of the jobs that passed, how many took more than three
# times that median, and the failed jobs with their longest time (a job
# that hangs ends at run_mpi.sh's limit, 150 s). Failed jobs are results,
# not errors: the script exits 0 once every job ran.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
ROUNDS=20
PROG="$ROOT/build/release/tests/mpi/mpi_edge_cancel"
RANKS=4
OUT=""
usage() {
    sed -n 's/^#   usage: //p' "$0" >&2
    exit 2
}
while getopts r:p:n:o:h o; do
    case "$o" in
    r) ROUNDS="$OPTARG" ;;
    p) PROG="$OPTARG" ;;
    n) RANKS="$OPTARG" ;;
    o) OUT="$OPTARG" ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
if [ "$(id -u)" -ne 0 ]; then
    echo "bench/stalls.sh: needs root (network namespaces)" >&2
    exit 77
fi
[ -x "$PROG" ] || { echo "bench/stalls.sh: $PROG not built" >&2; exit 1; }
NAMES=()
DIRS=()
for a in "$@"; do
    n="${a%%=*}"
    case "$a" in *=*) ;; *) usage ;; esac
    case "$n" in "" | *[!A-Za-z0-9._-]*) echo "bench/stalls.sh: bad build name '$n'" >&2; exit 2 ;; esac
    for m in "${NAMES[@]}"; do [ "$m" != "$n" ] || { echo "bench/stalls.sh: build $n twice" >&2; exit 2; }; done
    NAMES+=("$n")
    DIRS+=("${a#*=}")
    [ -e "${a#*=}/libtmx-fi.so" ] || { echo "bench/stalls.sh: no provider in ${a#*=}" >&2; exit 1; }
done
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tmx-stalls.XXXXXX")" || exit 1
JOB=""
# run_mpi.sh cleans its hosts and ranks up when it gets TERM
trap '[ -z "$JOB" ] || { kill "$JOB" 2>/dev/null; wait "$JOB"; }; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM
export TMX_OFFLOAD="${TMX_OFFLOAD:-1}"

for r in $(seq 1 "$ROUNDS"); do
    order=("${!NAMES[@]}")
    if [ $((r % 2)) -eq 0 ]; then
        order=()
        for ((i = ${#NAMES[@]} - 1; i >= 0; i--)); do order+=("$i"); done
    fi
    for i in "${order[@]}"; do
        t0=$(date +%s%N)
        bash "$ROOT/tests/mpi/run_mpi.sh" hosts "${DIRS[$i]}" "$PROG" "$RANKS" >"$TMP/log" 2>&1 &
        JOB=$!
        wait "$JOB"
        rc=$?
        JOB=""
        ms=$((($(date +%s%N) - t0) / 1000000))
        echo "${NAMES[$i]} $r $rc $ms" >>"$TMP/jobs"
        printf '%s round %d: %s in %d ms\n' "${NAMES[$i]}" "$r" "$([ $rc -eq 0 ] && echo ok || echo "FAILED ($rc)")" "$ms"
        [ $rc -eq 0 ] || tail -n 5 "$TMP/log" | sed 's/^/    /'
    done
done

{
    echo "$(basename "$PROG"), $RANKS ranks across 2 test hosts, TMX_OFFLOAD=$TMX_OFFLOAD, $ROUNDS rounds interleaved"
    echo
    echo "| build | jobs | passed: median s | p90 s | longest s | > 3x median | failed | failed: longest s |"
    echo "|---|---|---|---|---|---|---|---|"
    for n in "${NAMES[@]}"; do
        awk -v n="$n" '$1 == n { print $4, $3 }' "$TMP/jobs" | sort -n | awk -v n="$n" '
            $2 == 0 { t[++k] = $1 / 1000 }
            $2 != 0 { f++; fl = $1 / 1000 }
            END {
                m = k ? (k % 2 ? t[(k + 1) / 2] : (t[k / 2] + t[k / 2 + 1]) / 2) : 0
                p = k ? t[int(k * 0.9 + 0.999)] : 0
                for (i = 1; i <= k; i++) if (t[i] > 3 * m) slow++
                printf "| %s | %d | %.1f | %.1f | %.1f | %d | %d | %s |\n", n, k + f, m, p, k ? t[k] : 0,
                       slow, f, f ? sprintf("%.1f", fl) : "-"
            }'
    done
} | tee "$TMP/table"
[ -z "$OUT" ] || cp "$TMP/table" "$OUT"
