#!/usr/bin/env bash
# bench/lanes.sh - lanes for bulk data between two nodes (TMX_UDP_LANES,
# docs/udp.md) against none, in interleaved rounds, over udp between two
# test hosts made of network namespaces (tests/fault/hosts.sh):
#   bw        tmx-perf -t bw -s 1m, one rank per host (ranks on cores 0, 1)
#   alltoall  mp_test alltoall, PPN ranks per host, every pair both ways
#             with checked payloads of MP_AA_BYTES (4 MiB): the time rank 0
#             reports, and the source ports the bulk data left each host
#             from (nft: sends longer than a datagram, i.e. GSO)
# Each round runs every configuration once, in an order that alternates
# from round to round. Writes a markdown report to standard output.
# Usage: bench/lanes.sh [-r ROUNDS] [-p PPN[,PPN...]] [-l LANES]
#   -r ROUNDS  interleaved rounds (default 5)
#   -p PPN     ranks per host for the all-to-all (default 2,4,8)
#   -l LANES   the lanes compared with none (default 4)
# Needs root (namespaces, nft) and a release build in build/release.
set -euo pipefail
ROUNDS=5 PPNS=2,4,8 LANES=4
while getopts "r:p:l:h" o; do
    case $o in
    r) ROUNDS=$OPTARG ;;
    p) PPNS=$OPTARG ;;
    l) LANES=$OPTARG ;;
    *) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
B=$ROOT/build/release
TMXRUN=$B/tools/tmxrun PERF=$B/tools/tmx-perf MP=$B/tests/mp_test
for f in "$TMXRUN" "$PERF" "$MP"; do
    [ -x "$f" ] || { echo "lanes.sh: $f is missing (cmake --preset release && cmake --build --preset release)" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "lanes.sh: needs root (network namespaces, nft)" >&2; exit 1; }
# shellcheck disable=SC2034 # read by hosts.sh
FAULT_PREFIX="tmxln$$"
# shellcheck source=../tests/fault/hosts.sh
. "$ROOT/tests/fault/hosts.sh"
TMP=$(mktemp -d)
trap 'fault_hosts_down; rm -rf "$TMP"' EXIT INT TERM
fault_hosts_up 2 || { echo "lanes.sh: cannot make test hosts" >&2; exit 1; }
IFS=, read -r -a HOSTS <<<"$FAULT_HOSTS"
watch_ports() {
    fault_bulk_watch "${HOSTS[0]}" "$(fault_host_ip "${HOSTS[1]}")"
    fault_bulk_watch "${HOSTS[1]}" "$(fault_host_ip "${HOSTS[0]}")"
}
ports_seen() { # "h1/h2": source ports of bulk data from each host
    echo "$(fault_bulk_ports "${HOSTS[0]}")/$(fault_bulk_ports "${HOSTS[1]}")"
}

HOSTRUN=(--hosts "$FAULT_HOSTS" --agent 'ip netns exec {host}' --kvs-addr "$FAULT_KVS")
run_bw() { # LANES -> MB/s
    TMX_UDP_LANES=$1 "$TMXRUN" "${HOSTRUN[@]}" -n 2 --timeout 120 -- "$ROOT/bench/pin_rank.sh" "$PERF" \
        -t bw -s 1m -x udp --csv 2>"$TMP/err" | awk -F, '$1 == "bw" && NF == 6 { print $5 }'
}
run_aa() { # LANES PPN -> "seconds ports"
    local t
    watch_ports
    t=$(TMX_TRANSPORTS=self,shm,udp TMX_UDP_LANES=$1 MP_AA_BYTES=4194304 "$TMXRUN" "${HOSTRUN[@]}" -n $((2 * $2)) \
        --timeout 240 -- "$MP" alltoall 2>"$TMP/err" | sed -n 's/^mp_test alltoall: ok, [0-9]* ranks, \([0-9.]*\) s.*/\1/p')
    echo "${t:-fail} $(ports_seen)"
}

IFS=, read -r -a PPN_LIST <<<"$PPNS"
declare -A V P
start=$(date -u '+%F %T')
for r in $(seq "$ROUNDS"); do
    order="0 $LANES"
    [ $((r % 2)) -eq 0 ] && order="$LANES 0"
    for l in $order; do
        V[bw,$l,$r]=$(run_bw "$l")
        for p in "${PPN_LIST[@]}"; do
            read -r t ports < <(run_aa "$l" "$p")
            V[aa$p,$l,$r]=$t
            P[aa$p,$l]=$ports
        done
    done
    echo "round $r done" >&2
done

median() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "-" }'; }
row() { # KEY LABEL UNIT higher-is-better
    local a b all0="" allL="" r
    for r in $(seq "$ROUNDS"); do all0="$all0 ${V[$1,0,$r]}"; allL="$allL ${V[$1,$LANES,$r]}"; done
    a=$(echo "$all0" | median) b=$(echo "$allL" | median)
    printf '| %s | %s | %s | %s | %s | %s |\n' "$2" "$a" "$b" \
        "$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", b / a; else print "-" }')" \
        "$(echo "$all0" | xargs | tr ' ' '/')" "$(echo "$allL" | xargs | tr ' ' '/')"
}
echo "# Lanes for bulk data between two nodes"
echo
echo "Produced by \`bench/lanes.sh -r $ROUNDS -p $PPNS -l $LANES\`, $start to $(date -u '+%T') UTC, tmx at"
echo "$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- src || echo ' plus uncommitted changes'),"
echo "$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), two test hosts of network namespaces"
echo "joined by veth pairs and a bridge (MTU 1500). Interleaved rounds, medians; every round's figure after them."
echo
echo "| measure | TMX_UDP_LANES=0 | TMX_UDP_LANES=$LANES | $LANES / 0 | every round (0) | every round ($LANES) |"
echo "|---|---|---|---|---|---|"
row bw "tmx-perf bw 1 MiB, 1 rank per host (MB/s)"
for p in "${PPN_LIST[@]}"; do
    row "aa$p" "all-to-all 4 MiB, $p ranks per host (s, lower is better)"
done
echo
echo "Source ports the bulk data of the all-to-all left each host from (host 1 / host 2, the last round):"
echo
echo "| ranks per host | TMX_UDP_LANES=0 | TMX_UDP_LANES=$LANES |"
echo "|---|---|---|"
for p in "${PPN_LIST[@]}"; do
    echo "| $p | ${P[aa$p,0]} | ${P[aa$p,$LANES]} |"
done
