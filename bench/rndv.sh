#!/usr/bin/env bash
# bench/rndv.sh - the two rendezvous protocols side by side: the receiver
# reads (the default table: get and coop over shm, copy over udp) against
# rendezvous by write (TMX_PROTO's write from 64 KiB; docs/settings.md),
# by tmx-perf latency (median) and bandwidth, over shm (two ranks on this
# host) and over udp between two test hosts (network namespaces, root
# only; skipped otherwise), in interleaved rounds. The protocol table's
# defaults follow from these figures.
# Usage: bench/rndv.sh [-r ROUNDS] [-o FILE]   (writes bench/results/rndv.md)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
ROUNDS=3
OUT="$HERE/results/rndv.md"
while getopts "r:o:" opt; do
    case "$opt" in
    r) ROUNDS="$OPTARG" ;;
    o) OUT="$OPTARG" ;;
    *) echo "usage: bench/rndv.sh [-r ROUNDS] [-o FILE]" >&2; exit 2 ;;
    esac
done
BIN="$ROOT/build/release"
[ -x "$BIN/tools/tmx-perf" ] || { cmake --preset release >/dev/null && cmake --build --preset release -j "$(nproc)"; }
TMP=$(mktemp -d)
HOSTS_UP=0
cleanup() {
    [ "$HOSTS_UP" = 1 ] && fault_hosts_down
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

SIZES=65536,262144,1048576,4194304,16777216
TRANSPORTS="shm"
if [ "$(id -u)" -eq 0 ] && ip netns list >/dev/null 2>&1; then
    # shellcheck source=tests/fault/hosts.sh
    . "$ROOT/tests/fault/hosts.sh"
    fault_hosts_up 2 && HOSTS_UP=1 && TRANSPORTS="shm udp"
fi

# one tmx-perf run: TRANSPORT PROTO TEST ITERATIONS -> csv lines in $TMP/data
perf() {
    local tr="$1" proto="$2" test="$3" n="$4" spec=() launch=()
    [ "$proto" = write ] && spec=("TMX_PROTO=$tr:write@64k")
    if [ "$tr" = udp ]; then
        launch=(--hosts "$FAULT_HOSTS" --agent 'ip netns exec {host}' --kvs-addr "$FAULT_KVS")
    fi
    env TMX_TRANSPORTS="self,$tr" "${spec[@]}" timeout 600 "$BIN/tools/tmxrun" "${launch[@]}" -n 2 -- \
        "$BIN/tools/tmx-perf" -x "$tr" -t "$test" -s "$SIZES" -n "$n" --csv 2>/dev/null |
        awk -F, -v r="$ROUND" -v p="$proto" '$1 == "lat_p50" || $1 == "bw" {print r "," p "," $0}' >>"$TMP/data"
}

for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    for tr in $TRANSPORTS; do
        # alternate which protocol goes first, so that drift favours neither
        order="read write"
        [ $((ROUND % 2)) = 0 ] && order="write read"
        for proto in $order; do
            echo "round $ROUND: $tr $proto" >&2
            perf "$tr" "$proto" lat 200
            perf "$tr" "$proto" bw 20
        done
    done
done

median() { sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
val() { # PROTO METRIC TRANSPORT SIZE -> median over rounds
    awk -F, -v p="$1" -v m="$2" -v t="$3" -v s="$4" '$2 == p && $3 == m && $4 == t && $5 == s {print $7}' "$TMP/data" | median
}
{
    echo "# Rendezvous: read against write"
    echo
    echo "Produced by \`bench/rndv.sh -r $ROUNDS\` at tmx $(cd "$ROOT" && git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC'), on $(nproc) cores;"
    echo "$ROUNDS interleaved rounds (the order of the two protocols alternates), medians over rounds."
    echo "read: the default table (shm: get, coop from 128 KiB; udp: copy, the emulated read);"
    echo "write: \`TMX_PROTO=TRANSPORT:write@64k\`. shm: two ranks on this host; udp: one rank in each"
    echo "of two network-namespace hosts (tests/fault/hosts.sh). tmx-perf -t lat (median one-way"
    echo "latency, 200 iterations) and -t bw (20 iterations of a window)."
    for tr in $TRANSPORTS; do
        echo
        echo "## $tr"
        echo
        echo "| size | latency read (us) | latency write (us) | write / read | bandwidth read (MB/s) | bandwidth write (MB/s) | write / read |"
        echo "|---|---|---|---|---|---|---|"
        for s in ${SIZES//,/ }; do
            lr=$(val read lat_p50 "$tr" "$s")
            lw=$(val write lat_p50 "$tr" "$s")
            br=$(val read bw "$tr" "$s")
            bw=$(val write bw "$tr" "$s")
            rl=$(awk -v a="$lw" -v b="$lr" 'BEGIN {if (b > 0) printf "%.2f", a / b}')
            rb=$(awk -v a="$bw" -v b="$br" 'BEGIN {if (b > 0) printf "%.2f", a / b}')
            echo "| $((s / 1024)) KiB | $lr | $lw | $rl | $br | $bw | $rb |"
        done
    done
    echo
    echo "Raw rows (round, protocol, tmx-perf csv):"
    echo
    echo '```'
    sort -t, -k3,3 -k4,4 -k5,5n -k2,2 -k1,1n "$TMP/data"
    echo '```'
} >"$OUT"
echo "wrote $OUT" >&2
