#!/usr/bin/env bash
# bench/medium.sh - messages of 8 to 64 KiB over shared memory under Open
# MPI: an eager copy through the receiver's cells (tmx's default up to
# 64 KiB) against a rendezvous read (process_vm_readv, what ob1 + vader
# and tmx's `get` do above their eager limits), with the data to send in
# two states:
#   clean    each side sends a buffer nobody writes (osu_latency's way:
#            the lines sit unmodified in the caches)
#   written  rank 1 answers with the buffer it just received (osu_p2p -e):
#            its lines are modified in rank 1's cache, as an application's
#            freshly computed data is
# Systems: ob1 + vader, pml ucx, Open MPI over tmx with its default table
# (eager), and over tmx with `TMX_PROTO=shm:eager@0,get@8193` (a read from
# 8 KiB + 1). Latency by osu_p2p -t lat (mean one-way), interleaved rounds,
# the order of systems rotating each round; medians over rounds.
# Usage: bench/medium.sh [-r ROUNDS] [-o FILE]   (writes bench/results/medium.md)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
ROUNDS=3
OUT="$HERE/results/medium.md"
while getopts "r:o:" opt; do
    case "$opt" in
    r) ROUNDS="$OPTARG" ;;
    o) OUT="$OPTARG" ;;
    *) echo "usage: bench/medium.sh [-r ROUNDS] [-o FILE]" >&2; exit 2 ;;
    esac
done
BIN="$ROOT/build/release"
[ -f "$BIN/fabric/libtmx-fi.so" ] || { cmake --preset release >/dev/null && cmake --build --preset release -j "$(nproc)"; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
mpicc -O2 -o "$TMP/osu_p2p" "$HERE/mpi/osu_p2p.c"

SIZES=8192,16384,32768,65536
SYSTEMS="vader ucx tmx tmx-get"
ompi_info 2>/dev/null | grep -q "MCA pml: ucx" || SYSTEMS="vader tmx tmx-get"
MPI=(timeout 120 mpirun --allow-run-as-root -n 2 --bind-to core)
TMXFI=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tmx -x "FI_PROVIDER_PATH=$BIN/fabric")

one() { # SYSTEM MODE
    local args=()
    case $1 in
    vader) args=(--mca pml ob1 --mca btl self,vader) ;;
    ucx) args=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any) ;;
    tmx) args=("${TMXFI[@]}") ;;
    tmx-get) args=("${TMXFI[@]}" -x TMX_PROTO=shm:eager@0,get@8193) ;;
    esac
    local flag=()
    [ "$2" = written ] && flag=(-e)
    "${MPI[@]}" "${args[@]}" "$TMP/osu_p2p" -t lat -s "$SIZES" "${flag[@]}" 2>/dev/null |
        awk -F, -v r="$ROUND" -v s="$1" -v m="$2" '$1 == "lat" && $2 ~ /^[0-9]+$/ {printf "%s,%s,%s,%s,%.3f\n", r, m, s, $2, $4}' >>"$TMP/data"
}

for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    set -- $SYSTEMS
    k=$(((ROUND - 1) % $#))
    order="${*:k+1} ${*:1:k}"
    for mode in clean written; do
        for s in $order; do
            echo "round $ROUND: $mode $s" >&2
            one "$s" "$mode"
        done
    done
done

median() { sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
val() { # MODE SYSTEM SIZE -> median over rounds
    awk -F, -v m="$1" -v s="$2" -v z="$3" '$2 == m && $3 == s && $4 == z {print $5}' "$TMP/data" | median
}
every() { # MODE SYSTEM SIZE -> every round's value
    awk -F, -v m="$1" -v s="$2" -v z="$3" '$2 == m && $3 == s && $4 == z {printf "%s%s", sep, $5; sep = " / "}' "$TMP/data"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a != "" && b > 0) printf "%.2f", a / b}'; }
{
    echo "# Messages of 8 to 64 KiB over shared memory: eager or a read"
    echo
    echo "Produced by \`bench/medium.sh -r $ROUNDS\` at tmx $(cd "$ROOT" && git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC'),"
    echo "on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')); Open MPI $(ompi_info 2>/dev/null | awk '/Open MPI:/ {print $3; exit}')."
    echo "$ROUNDS interleaved rounds; mean one-way latency of osu_p2p -t lat (us), median over rounds."
    echo "tmx: Open MPI over the provider, default table (eager up to 64 KiB); tmx-get: the same with"
    echo "\`TMX_PROTO=shm:eager@0,get@8193\` (a rendezvous read from 8 KiB + 1, as vader's from 4 KiB)."
    echo "clean: both send buffers nobody writes (osu_latency); written: rank 1 answers with the buffer"
    echo "it just received (\`osu_p2p -e\`), data modified in its cache."
    for mode in clean written; do
        echo
        echo "## $mode"
        echo
        printf '| size |'; for s in $SYSTEMS; do printf ' %s |' "$s"; done
        echo ' tmx / vader | tmx-get / vader |'
        printf '|---|'; for _ in $SYSTEMS; do printf -- '---|'; done; echo '---|---|'
        for z in ${SIZES//,/ }; do
            printf '| %s KiB |' $((z / 1024))
            for s in $SYSTEMS; do printf ' %s [%s] |' "$(val $mode "$s" "$z")" "$(every $mode "$s" "$z")"; done
            v=$(val $mode vader "$z")
            echo " $(ratio "$(val $mode tmx "$z")" "$v") | $(ratio "$(val $mode tmx-get "$z")" "$v") |"
        done
    done
    echo
    echo "Commands: \`mpirun --allow-run-as-root -n 2 --bind-to core ARGS osu_p2p -t lat -s $SIZES [-e]\`, ARGS"
    echo "\`--mca pml ob1 --mca btl self,vader\`, \`--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any\`,"
    echo "\`--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tmx -x FI_PROVIDER_PATH=build/release/fabric\`"
    echo "[\`-x TMX_PROTO=shm:eager@0,get@8193\`]."
} >"$OUT"
echo "wrote $OUT" >&2
