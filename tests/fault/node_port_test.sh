#!/bin/bash
# One UDP port per node, across test hosts made of network namespaces:
# several ranks per host share one port (counted in the host's
# /proc/net/udp while the job runs) and exchange checked payloads over
# udp alone, also with their host-mates through that port; a rank killed
# mid-job is found dead by the others while its host-mate goes on; with
# TMX_UDP_SHARED_PORT=0 each rank has a port of its own again; bulk data
# from one host to the other leaves from TMX_UDP_LANES source ports however
# many ranks send it (lanes), from one per rank with TMX_UDP_LANES=0.
# Needs root; exits 77 (skipped) without it.
#   usage: node_port_test.sh TMXRUN MP_TEST
set -u
TMXRUN="$1"
MP_TEST="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
fails=0

if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
    echo "SKIP: node port tests need root and network namespaces"
    exit 77
fi
# shellcheck disable=SC2034 # read by hosts.sh
FAULT_PREFIX="tmxnp$$"
# shellcheck source=hosts.sh
. "$HERE/hosts.sh"
LOG="$(mktemp)"
PORTS="$(mktemp)"
trap 'rm -f "$LOG" "$PORTS"; fault_hosts_down' EXIT INT TERM
fault_hosts_up 2 || { echo "FAIL: cannot make test hosts"; exit 1; }
IFS=, read -r -a HOSTS <<<"$FAULT_HOSTS"
export TMX_TRANSPORTS=self,udp

# job N TIMEOUT CASE [ENV...]: an mp_test job on both hosts, its output in $LOG.
job() {
    local n="$1" t="$2" case="$3"
    shift 3
    env "$@" timeout $((t + 30)) "$TMXRUN" --hosts "$FAULT_HOSTS" --agent 'ip netns exec {host}' \
        --kvs-addr "$FAULT_KVS" -n "$n" --timeout "$t" -- "$MP_TEST" "$case" >"$LOG" 2>&1
}

# The unconnected udp sockets of host H that receive (local address:port),
# one a line: the ports ranks receive on. Connected ones (a remote address)
# send, and so do the lanes' sockets (a receive buffer of the least size
# the kernel allows, which no receiving socket of tmx has).
host_ports() {
    ip netns exec "$1" ss -uanm | awk '
        /^UNCONN/ { local = $4; next }
        /skmem:/ && local != "" {
            if (match($0, /rb[0-9]+/) && substr($0, RSTART + 2, RLENGTH - 2) + 0 >= 65536) print local
            local = ""
        }'
}

# Waits (up to 10 s) until neither host has a receiving socket left: a
# context lingers up to a second after its job to deliver its last
# segments, and the next job's sample must not count its socket.
hosts_quiet() {
    local i
    for i in $(seq 200); do
        [ -z "$(host_ports "${HOSTS[0]}")" ] && [ -z "$(host_ports "${HOSTS[1]}")" ] && return 0
        sleep 0.05
    done
    echo "   (sockets of an earlier job still open after 10 s)"
}

# Samples both hosts' receiving sockets while a job runs; writes, for the
# sample with the most sockets on each host, "host sockets ports". A
# socket counts only if the sample before (50 ms earlier) saw it too: a
# send socket is bound a moment before it is connected, and a sample in
# between would count it (as happened under ASan, which widens the gap).
sample_ports() {
    local best_a=0 best_b=0 line_a="" line_b="" h s p snap
    local -A prev=()
    : >"$PORTS"
    while kill -0 "$1" 2>/dev/null; do
        for h in "${HOSTS[0]}" "${HOSTS[1]}"; do
            snap="$(host_ports "$h" | sort)"
            local seen=${prev[$h]:-}
            prev[$h]=$snap
            snap="$(comm -12 <(printf '%s\n' "$seen") <(printf '%s\n' "$snap") | grep -v '^$' || true)"
            [ -n "$snap" ] || continue
            s=$(wc -l <<<"$snap")
            p=$(sort -u <<<"$snap" | wc -l)
            if [ "$h" = "${HOSTS[0]}" ] && [ "$s" -gt "$best_a" ]; then
                best_a=$s; line_a="$h $s $p"
            elif [ "$h" = "${HOSTS[1]}" ] && [ "$s" -gt "$best_b" ]; then
                best_b=$s; line_b="$h $s $p"
            fi
        done
        sleep 0.05
    done
    printf '%s\n%s\n' "$line_a" "$line_b" >"$PORTS"
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

# ports_are SOCKETS PORTS: every host had SOCKETS receiving sockets at once
# on PORTS distinct ports.
ports_are() {
    local ok=1 h s p
    while read -r h s p; do
        echo "   $h: $s receiving sockets on $p ports"
        [ "$s" = "$1" ] && [ "$p" = "$2" ] || ok=0
    done <"$PORTS"
    [ "$(wc -l <"$PORTS")" -eq 2 ] || ok=0
    return $((1 - ok))
}

echo "== 8 ranks on 2 hosts, udp only: one port per host, every payload checked"
hosts_quiet
job 8 120 alltoall MP_AA_BYTES=4194304 &
pid=$!
sample_ports "$pid"
wait "$pid"
rc=$?
ok=0; [ "$rc" -eq 0 ] && ! grep -q "FAIL\|died\|failed:" "$LOG" && ports_are 4 1 && ok=1
grep -h "^mp_test alltoall" "$LOG"
verdict "alltoall, 4 ranks per host on one port" "$ok"

echo "== TMX_UDP_SHARED_PORT=0: a port per rank"
hosts_quiet
job 8 120 alltoall MP_AA_BYTES=4194304 TMX_UDP_SHARED_PORT=0 &
pid=$!
sample_ports "$pid"
wait "$pid"
rc=$?
ok=0; [ "$rc" -eq 0 ] && ports_are 4 4 && ok=1
verdict "alltoall, a port per rank" "$ok"

echo "== a rank killed mid-job: its host-mate goes on, the others find it dead at once"
# rank 2 dies; rank 0 shares its host (and port), rank 1 is on the other.
# Rank 1 never sent to rank 2: it learns of the death when its keepalive,
# after a quarter of the peer timeout of silence (at most 1 s), is
# answered NOBODY three times; a 2 s timeout keeps that well inside the
# case's 1.5 s limit on a loaded machine (1 s of silence came to 1.2 to
# 1.5 s under ASan beside other tests).
job 3 60 peerdeath TMX_UDP_PEER_TIMEOUT_MS=2000
ok=0
grep -q "peerdeath ok rank 0" "$LOG" && grep -q "peerdeath ok rank 1" "$LOG" && ok=1
grep -h "failed as expected\|survivors done" "$LOG"
verdict "peerdeath, the dead rank's host-mate on its port" "$ok"

# Each host's bulk data to the other: the source ports it left from,
# collected by the kernel while a job runs (hosts.sh).
lanes_watch() {
    fault_bulk_watch "${HOSTS[0]}" "$(fault_host_ip "${HOSTS[1]}")" &&
        fault_bulk_watch "${HOSTS[1]}" "$(fault_host_ip "${HOSTS[0]}")"
}
# lanes_are N: each host sent bulk data to the other from N source ports.
lanes_are() {
    local ok=1 h n
    for h in "${HOSTS[@]}"; do
        n=$(fault_bulk_ports "$h")
        echo "   $h: bulk data to the other host from ${n:-?} source ports"
        [ "${n:-x}" = "$1" ] || ok=0
    done
    return $((1 - ok))
}

if ! command -v nft >/dev/null; then
    echo "SKIP lanes: no nft to count the source ports on the wire (nftables)"
    [ "$fails" -eq 0 ] && echo "all node port tests passed"
    exit $((fails > 0))
fi
echo "== lanes: 4 ranks per host send bulk data from TMX_UDP_LANES=2 ports"
hosts_quiet
ok=0
if lanes_watch; then
    job 8 120 alltoall MP_AA_BYTES=1048576 TMX_UDP_LANES=2
    rc=$?
    [ "$rc" -eq 0 ] && ! grep -q "FAIL\|died\|failed:" "$LOG" && lanes_are 2 && ok=1
fi
verdict "alltoall, 2 lanes per pair of hosts" "$ok"

echo "== TMX_UDP_LANES=0: bulk data from each rank's own socket"
hosts_quiet
ok=0
if lanes_watch; then
    job 8 120 alltoall MP_AA_BYTES=1048576 TMX_UDP_LANES=0
    rc=$?
    [ "$rc" -eq 0 ] && lanes_are 4 && ok=1
fi
verdict "alltoall, no lanes: a flow per rank" "$ok"

[ "$fails" -eq 0 ] && echo "all node port tests passed" || echo "$fails node port tests failed"
[ "$fails" -eq 0 ]
