#!/usr/bin/env bash
# bench/ab.sh - interleaved A/B of two tmx commits on this machine: is a
# change faster, slower or the same?
#
# Builds both commits (release, in worktrees under a temporary folder, with
# the benchmark program of commit B for both, so that only the library
# differs), then runs R rounds; each round runs A and B back to back, in
# an order that alternates, rank r of tmx-perf pinned to core r
# (pin_rank.sh: left to the scheduler, the two ranks of a udp run shared
# one core now and then, and its figures came out bimodal):
#   tmx-perf -x shm: latency at 8 B, 64 KiB and 1 MiB, bandwidth at 1 MiB,
#                    message rate at 8 B
#   tmx-perf -x udp: latency at 8 B, bandwidth at 64 KiB (on this host)
#   tmx-perf -t wake: the round trip to a peer asleep in its wait, 8 B,
#                    over shm alone and with udp open too (shm+udp)
#   Open MPI:        bench/mpi/osu_p2p.c under pml cm, mtl ofi and each
#                    build's provider: latency, bandwidth at 8 B, 64 KiB,
#                    1 MiB, message rate at 8 B
# The machine is shared and its speed drifts, often for seconds at a time:
# A and B of one round run within a few seconds of each other, so each
# round gives a ratio B/A, and the report's figure is the median of the
# rounds' ratios (with the medians of A and B beside it).
#
# Usage: bench/ab.sh [-r ROUNDS] [-o FILE] COMMIT_A COMMIT_B
#   -r ROUNDS   rounds (default 6)
#   -o FILE     the markdown report (default: standard output), and every
#               figure of every round in FILE.csv
# Needs: cmake, gcc, taskset, mpicc and mpirun (Open MPI; the MPI rows are
# left out without them).
set -euo pipefail

ROUNDS=6
OUT=""
usage() { sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while getopts "r:o:h" o; do
    case $o in
    r) ROUNDS=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || usage
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d)
cleanup() {
    pkill -P $$ 2>/dev/null || true
    for w in a b; do git -C "$ROOT" worktree remove --force "$TMP/$w" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

build() { # label commit
    local dir=$TMP/$1
    git -C "$ROOT" worktree add -f --detach "$dir" "$2" >/dev/null 2>&1
    cp "$ROOT/bench/mpi/osu_p2p.c" "$TMP/osu_p2p.c"
    git -C "$ROOT" show "$COMMIT_B:tools/perf_p2p.c" >"$dir/tools/perf_p2p.c"
    cmake -S "$dir" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release >"$TMP/$1.cmake.log" 2>&1
    cmake --build "$dir/build" -j2 --target tmx-perf tmxrun tmx-fi >"$TMP/$1.build.log" 2>&1 ||
        { echo "ab.sh: cannot build $2 (see $TMP/$1.build.log)" >&2; tail -20 "$TMP/$1.build.log" >&2; exit 1; }
}

COMMIT_A=$(git -C "$ROOT" rev-parse --short "$1")
COMMIT_B=$(git -C "$ROOT" rev-parse --short "$2")
echo "ab.sh: building A=$COMMIT_A and B=$COMMIT_B" >&2
build a "$COMMIT_A"
build b "$COMMIT_B"
MPI=0
if command -v mpicc >/dev/null && command -v mpirun >/dev/null &&
    mpicc -O2 -o "$TMP/osu_p2p" "$TMP/osu_p2p.c" 2>/dev/null; then
    MPI=1
fi
CSV=$TMP/data.csv
: >"$CSV"

perf() { # label dir args...
    local l=$1 d=$2
    shift 2
    timeout 180 "$d/build/tools/tmxrun" -n 2 --timeout 150 "$ROOT/bench/pin_rank.sh" "$d/build/tools/tmx-perf" --csv "$@" \
        2>/dev/null | awk -F, -v l="$l" '$1 != "test" {print l "," $1 "," $2 "," $3 "," $5 "," $6}' >>"$CSV" || true
}

osu() { # label dir
    [ "$MPI" = 1 ] || return 0
    timeout 300 mpirun --allow-run-as-root -n 2 --bind-to none --mca pml cm --mca mtl ofi \
        --mca mtl_ofi_provider_include tmx -x FI_PROVIDER_PATH="$2/build/fabric" \
        "$TMP/osu_p2p" -p -t lat,bw,rate -s 8,64k,1m -d 4 2>/dev/null |
        awk -F, -v l="$1" '$2+0 > 0 && $1 == "lat" {print l ",mpi_lat,ompi," $2 "," $5 ",us"}
                           $2+0 > 0 && $1 == "bw" {print l ",mpi_bw,ompi," $2 "," $4 ",MB/s"}
                           $2+0 > 0 && $1 == "rate" {print l ",mpi_rate,ompi," $2 "," $5 ",msg/s"}' >>"$CSV" || true
}

one() { # label
    local d=$TMP/$1
    perf "$1" "$d" -t lat -x shm -s 8 -n 200000
    perf "$1" "$d" -t lat -x shm -s 64k,1m
    perf "$1" "$d" -t bw -x shm -s 1m
    perf "$1" "$d" -t rate -x shm -s 8 -n 1000000
    perf "$1" "$d" -t lat -x udp -s 8 -n 50000
    perf "$1" "$d" -t bw -x udp -s 64k
    perf "$1" "$d" -t wake -x shm -s 8
    perf "$1" "$d" -t wake -x shm,udp -s 8
    osu "$1" "$d"
}

for r in $(seq "$ROUNDS"); do
    echo "ab.sh: round $r of $ROUNDS" >&2
    if [ $((r % 2)) = 1 ]; then one a; one b; else one b; one a; fi
done

report() {
    echo "# Interleaved A/B: A = $COMMIT_A, B = $COMMIT_B"
    echo
    echo "$(date -u +%F), $(hostname), $ROUNDS rounds, \`bench/ab.sh -r $ROUNDS $1 $2\`. Each round runs A"
    echo "and B back to back (alternating which goes first); *B/A* is the median over rounds of"
    echo "each round's ratio. Latency: lower is better; bandwidth and rate: higher is better."
    echo
    python3 - "$CSV" <<'EOF'
import csv, statistics as st, sys
d = {}
for row in csv.reader(open(sys.argv[1])):
    if len(row) < 6:
        continue
    lab, test, tl, size, val, unit = row[:6]
    d.setdefault((test, tl, int(size), unit), {}).setdefault(lab, []).append(float(val))
print("| test | transport | size (B) | unit | A median | B median | B/A | rounds |")
print("|---|---|---|---|---|---|---|---|")
for k in sorted(d):
    a, b = d[k].get("a", []), d[k].get("b", [])
    n = min(len(a), len(b))
    if n:
        r = st.median([b[i] / a[i] for i in range(n)])
        print("| %s | %s | %d | %s | %.4g | %.4g | %.3f | %d |" % (k[0], k[1], k[2], k[3], st.median(a), st.median(b), r, n))
EOF
}

if [ -n "$OUT" ]; then
    report "$1" "$2" >"$OUT"
    cp "$CSV" "$OUT.csv"
else
    report "$1" "$2"
fi
