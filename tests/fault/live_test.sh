#!/bin/bash
# Peer liveness over udp across test hosts made of network namespaces,
# with default settings unless said: busy is not dead, killed is dead
# (the kernel refuses its port), a vanished host is found by the silence
# limit, and a large all-to-all on few cores sees no false death.
# Needs root; exits 77 (skipped) without it.
#   usage: live_test.sh TMXRUN MP_TEST
# Settings (environment):
#   LIVE_BUSY_S     how long the busy rank computes without calling tmx
#                   (default 60: a compute phase of a minute)
#   LIVE_AA_HOSTS, LIVE_AA_RANKS   the all-to-all's hosts and ranks
#                   (default 8 hosts, 128 ranks: about 25 s here)
#   LIVE_AA_BYTES   its large messages (default 262144)
set -u
TMXRUN="$1"
MP_TEST="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
BUSY_S="${LIVE_BUSY_S:-60}"
AA_HOSTS="${LIVE_AA_HOSTS:-8}"
AA_RANKS="${LIVE_AA_RANKS:-128}"
AA_BYTES="${LIVE_AA_BYTES:-262144}"
fails=0

if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
    echo "SKIP: liveness tests need root and network namespaces"
    exit 77
fi
# shellcheck source=hosts.sh
. "$HERE/hosts.sh"
LOG="$(mktemp)"
trap 'rm -f "$LOG"; fault_hosts_down' EXIT INT TERM
fault_hosts_up "$AA_HOSTS" || { echo "FAIL: cannot make test hosts"; exit 1; }
IFS=, read -r -a HOSTS <<<"$FAULT_HOSTS"
TWO="${HOSTS[0]},${HOSTS[1]}"
export TMX_TRANSPORTS=self,shm,udp

# job HOSTS N TIMEOUT CASE [ENV...]: an mp_test job, its output in $LOG.
job() {
    local hosts="$1" n="$2" t="$3" case="$4"
    shift 4
    env "$@" timeout $((t + 30)) "$TMXRUN" --hosts "$hosts" --agent 'ip netns exec {host}' \
        --kvs-addr "$FAULT_KVS" -n "$n" --timeout "$t" -- "$MP_TEST" "$case" >"$LOG" 2>&1
}

verdict() { # NAME OK
    if [ "$2" -eq 1 ]; then
        echo "ok   $1"
    else
        echo "FAIL $1"
        grep -v '^tmx\[' "$LOG" | tail -n 15
        grep '^tmx\[' "$LOG" | tail -n 5
        fails=$((fails + 1))
    fi
}

echo "== a rank busy for $BUSY_S s without calling tmx is not dead"
job "$TWO" 2 $((BUSY_S + 60)) busy MP_BUSY_S="$BUSY_S"
rc=$?
ok=0; [ "$rc" -eq 0 ] && grep -q "is alive" "$LOG" && ok=1
grep -h "^busy:" "$LOG"
verdict "busy $BUSY_S s" "$ok"

echo "== a killed rank is reported dead at once (default timeout: the kernel refuses)"
job "${HOSTS[0]},${HOSTS[1]},${HOSTS[2]}" 3 60 peerdeath
ok=0
grep -q "peerdeath ok rank 0" "$LOG" && grep -q "peerdeath ok rank 1" "$LOG" && ok=1
grep -h "failed as expected" "$LOG"
verdict "peerdeath across 3 hosts" "$ok"

echo "== a host that vanishes (link down, nothing refuses) is found by the silence limit"
job "$TWO" 2 15 hostgone TMX_UDP_PEER_TIMEOUT_MS=4000 &
pid=$!
for _ in $(seq 200); do
    grep -q "rank 1 ready" "$LOG" && break
    sleep 0.1
done
ip -n "${HOSTS[1]}" link set eth0 down
wait "$pid"
ok=0; grep -q "hostgone ok rank 0" "$LOG" && ok=1
grep -h "hostgone ok" "$LOG"
verdict "hostgone" "$ok"
ip -n "${HOSTS[1]}" link set eth0 up

echo "== all-to-all, $AA_RANKS ranks on $AA_HOSTS hosts, $AA_BYTES-byte messages: no false death"
job "$FAULT_HOSTS" "$AA_RANKS" 240 alltoall MP_AA_BYTES="$AA_BYTES"
rc=$?
ok=0; [ "$rc" -eq 0 ] && ! grep -q "died\|failed:" "$LOG" && ok=1
grep -h "^mp_test alltoall" "$LOG"
verdict "alltoall $AA_HOSTS x $((AA_RANKS / AA_HOSTS))" "$ok"

[ "$fails" -eq 0 ] && echo "all liveness tests passed" || echo "$fails liveness tests failed"
[ "$fails" -eq 0 ]
