#!/bin/bash
# Fault tests: the multi-process tests across test hosts made of network
# namespaces, over the udp transport, clean and under every fault profile
# (injected by the transport, and dropped by the kernel with nft). Needs
# root; exits 77 (skipped) without it. Usage: fault_test.sh TMXRUN MP_TEST
set -u
TMXRUN="$1"
MP_TEST="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
fails=0

if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
    echo "SKIP: fault tests need root and network namespaces"
    exit 77
fi
# shellcheck source=hosts.sh
. "$HERE/hosts.sh"
trap fault_hosts_down EXIT INT TERM
fault_hosts_up 3 || { echo "FAIL: cannot make test hosts"; exit 1; }
IFS=, read -r -a HOSTS <<<"$FAULT_HOSTS"

# run NAME RANKS HOSTS CASE [ENV...]: one mp_test case across hosts.
run() {
    local name="$1" n="$2" hosts="$3" case="$4" t0 rc
    shift 4
    t0=$(date +%s)
    env "$@" timeout 400 "$TMXRUN" --hosts "$hosts" --agent 'ip netns exec {host}' \
        --kvs-addr "$FAULT_KVS" -n "$n" --timeout 300 -- "$MP_TEST" "$case" >"$LOG" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ]; then
        echo "ok   $name ($(( $(date +%s) - t0 )) s)"
    else
        echo "FAIL $name: exit $rc"
        grep -v '^tmx\[' "$LOG" | tail -n 15
        fails=$((fails + 1))
    fi
}

LOG="$(mktemp)"
trap 'rm -f "$LOG"; fault_hosts_down' EXIT INT TERM
TWO="${HOSTS[0]},${HOSTS[1]}"
ALL="$FAULT_HOSTS"
UDP=TMX_TRANSPORTS=self,shm,udp
echo "== across hosts, no faults"
run "pingpong, 2 hosts" 2 "$TWO" pingpong "$UDP"
run "anysource, 8 ranks on 3 hosts (shm and udp)" 8 "$ALL" anysource "$UDP"
run "order" 2 "$TWO" order "$UDP"
run "truncate" 2 "$TWO" truncate "$UDP"
run "probe" 2 "$TWO" probe "$UDP"
run "oversub, 12 ranks on 3 hosts" 12 "$ALL" oversub "$UDP"
# An unexpected flood across hosts: the receiver's peak memory stays
# within its bound (plus mp_test's slack) although most senders reach it
# over udp, every message once and in order.
run "flood, 8 senders on 3 hosts, bound 4 MiB" 9 "$ALL" flood "$UDP" TMX_UNEXPECTED_MAX=4194304 MP_FLOOD_N=10000

for profile in drop=0.01 drop=0.05 drop=0.2 dup=0.01 reorder=0.05 corrupt=0.001 \
    drop=0.05,dup=0.01,reorder=0.05,corrupt=0.001; do
    echo "== injected faults: $profile"
    # Default settings throughout (timeouts from measured round trips);
    # at 20 % loss the ping-pong stops at 16 MiB to keep the run short.
    MAX=MP_MAX_BYTES=67108864
    [ "$profile" = drop=0.2 ] && MAX=MP_MAX_BYTES=16777216
    F="TMX_UDP_FAULTS=$profile"
    run "pingpong up to $((${MAX#*=} >> 20)) MiB" 2 "$TWO" pingpong "$UDP" "$F" "$MAX"
    run "order" 2 "$TWO" order "$UDP" "$F"
    run "truncate" 2 "$TWO" truncate "$UDP" "$F"
    run "probe" 2 "$TWO" probe "$UDP" "$F"
    run "anysource, 6 ranks on 3 hosts" 6 "$ALL" anysource "$UDP" "$F"
done

echo "== the offload engine on (every receive through its list), clean and under faults"
OFF=(TMX_OFFLOAD=1 TMX_OFFLOAD_MIN=0 TMX_OFFLOAD_TAGS=8)
run "pingpong, engine" 2 "$TWO" pingpong "$UDP" "${OFF[@]}"
run "anysource, 8 ranks on 3 hosts, engine" 8 "$ALL" anysource "$UDP" "${OFF[@]}"
F=TMX_UDP_FAULTS=drop=0.05,dup=0.01,reorder=0.05,corrupt=0.001
run "pingpong up to 16 MiB, engine, faults" 2 "$TWO" pingpong "$UDP" "$F" MP_MAX_BYTES=16777216 "${OFF[@]}"
run "order, engine, faults" 2 "$TWO" order "$UDP" "$F" "${OFF[@]}"
run "truncate, engine, faults" 2 "$TWO" truncate "$UDP" "$F" "${OFF[@]}"
run "probe, engine, faults" 2 "$TWO" probe "$UDP" "$F" "${OFF[@]}"
run "anysource, 6 ranks on 3 hosts, engine, faults" 6 "$ALL" anysource "$UDP" "$F" "${OFF[@]}"

echo "== rendezvous by write (every message not sent eagerly), clean and under faults"
WR="TMX_PROTO=shm:write@0;udp:write@0"
run "pingpong up to 16 MiB, write" 2 "$TWO" pingpong "$UDP" "$WR" MP_MAX_BYTES=16777216
run "anysource, 8 ranks on 3 hosts, write" 8 "$ALL" anysource "$UDP" "$WR"
F=TMX_UDP_FAULTS=drop=0.05,dup=0.01,reorder=0.05,corrupt=0.001
run "pingpong up to 16 MiB, write, faults" 2 "$TWO" pingpong "$UDP" "$WR" "$F" MP_MAX_BYTES=16777216
run "order, write, faults" 2 "$TWO" order "$UDP" "$WR" "$F"
run "truncate, write, faults" 2 "$TWO" truncate "$UDP" "$WR" "$F"
run "probe, write, faults" 2 "$TWO" probe "$UDP" "$WR" "$F"
run "anysource, 6 ranks on 3 hosts, write, faults" 6 "$ALL" anysource "$UDP" "$WR" "$F"

echo "== kernel drops (nft, 5 % of UDP datagrams each way)"
for h in "${HOSTS[@]}"; do fault_nft_drop "$h" 5; done
run "pingpong up to 64 MiB" 2 "$TWO" pingpong "$UDP"
run "order" 2 "$TWO" order "$UDP"
run "anysource, 6 ranks on 3 hosts" 6 "$ALL" anysource "$UDP"
for h in "${HOSTS[@]}"; do fault_nft_clear "$h"; done

echo "== a remote rank killed: its peers see TMX_ERR_PEER_FAILED"
if env "$UDP" TMX_UDP_PEER_TIMEOUT_MS=300 timeout 100 "$TMXRUN" --hosts "$ALL" \
    --agent 'ip netns exec {host}' --kvs-addr "$FAULT_KVS" -n 3 --timeout 60 -- \
    "$MP_TEST" peerdeath >"$LOG" 2>&1; then
    echo "FAIL peerdeath: the job should end with the killed rank's status"
    fails=$((fails + 1))
elif grep -q "peerdeath ok rank 0" "$LOG" && grep -q "peerdeath ok rank 1" "$LOG"; then
    echo "ok   peerdeath across hosts"
else
    echo "FAIL peerdeath across hosts"
    grep -v '^tmx\[' "$LOG" | tail -n 15
    fails=$((fails + 1))
fi

echo "== nothing left behind"
for ns in "${HOSTS[@]}"; do
    if [ -n "$(ip netns pids "$ns" 2>/dev/null)" ]; then
        echo "FAIL processes left in $ns"
        fails=$((fails + 1))
    fi
done
[ "$fails" -eq 0 ] && echo "all fault tests passed" || echo "$fails fault tests failed"
[ "$fails" -eq 0 ]
