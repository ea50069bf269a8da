#!/bin/bash
# The scale all-to-all in its short form: mp_test's scale case (8 B, then
# 64 KiB, from every rank to every other, payloads checked) on test hosts
# made of network namespaces, each rank printing its sockets, descriptors
# and memory; then a summary of those figures per process and per host.
# It fails if the job fails or any rank does not report, and checks that
# no process is left in a host before removing them.
# Needs root; exits 77 (skipped) without it.
#   usage: scale_test.sh TMXRUN MP_TEST
# Settings (environment):
#   SCALE_HOSTS  hosts (default 8)
#   SCALE_PPN    ranks per host (default 4; bench/scale.sh runs up to 16)
#   SCALE_TIMEOUT  tmxrun's limit on the job in seconds (default 60, so
#                that the script ends, and cleans up, within ctest's 120)
set -u
TMXRUN="$1"
MP_TEST="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
HOSTS_N="${SCALE_HOSTS:-8}"
PPN="${SCALE_PPN:-4}"
N=$((HOSTS_N * PPN))
TIMEOUT="${SCALE_TIMEOUT:-60}"

if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
    echo "SKIP: the scale test needs root and network namespaces"
    exit 77
fi
# shellcheck source=hosts.sh
. "$HERE/hosts.sh"
LOG="$(mktemp)"
JOB=""
cleanup() {
    [ -z "$JOB" ] || kill -9 "$JOB" 2>/dev/null
    rm -f "$LOG"
    fault_hosts_down
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
    echo "FAIL: $*"
    grep -v '^scale lib=' "$LOG" | tail -n 20
    exit 1
}

fault_hosts_up "$HOSTS_N" || fail "cannot make $HOSTS_N test hosts"
export TMX_TRANSPORTS=self,shm,udp
echo "== scale all-to-all: $N ranks, $PPN on each of $HOSTS_N hosts, 8 B and 64 KiB"
t0=$(date +%s.%N)
timeout -k 5 $((TIMEOUT + 15)) "$TMXRUN" --hosts "$FAULT_HOSTS" --agent 'ip netns exec {host}' \
    --kvs-addr "$FAULT_KVS" -n "$N" --timeout "$TIMEOUT" -- "$MP_TEST" scale >"$LOG" 2>&1 &
JOB=$!
wait "$JOB"
rc=$?
JOB=""
secs=$(echo "$(date +%s.%N) - $t0" | bc)
printf 'tmxrun exit %d after %.1f s\n' "$rc" "$secs"
grep -h '^scale: \|^mp_test scale' "$LOG"
[ "$rc" -eq 0 ] || fail "the job exited $rc"
grep -q "^mp_test scale: ok, $N ranks" "$LOG" || fail "no final ok from rank 0"
! grep -q "mp_test FAIL" "$LOG" || fail "a rank failed"
ranks=$(awk '/^scale lib=tmx / { for (i = 2; i <= NF; i++) if ($i ~ /^rank=/) print substr($i, 6) }' "$LOG" |
    sort -un | wc -l)
[ "$ranks" -eq "$N" ] || fail "$ranks of $N ranks reported their figures"

# Per process: min and max of each figure; per host: the sum of its
# processes' UDP sockets, and the namespace's UDP table as one rank saw it.
awk -v ppn="$PPN" '/^scale lib=tmx / {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        n++
        for (k in v) if (k != "lib" && k != "rank" && k != "netns" && k != "size") {
            if (!(k in lo) || v[k] + 0 < lo[k]) lo[k] = v[k] + 0
            if (!(k in hi) || v[k] + 0 > hi[k]) hi[k] = v[k] + 0
        }
        host_udp[v["netns"]] += v["udp"]; host_ns[v["netns"]] = v["ns_udp"]; host_n[v["netns"]]++
    }
    END {
        printf "per process (min-max over %d): UDP sockets %d-%d, TCP %d-%d, all sockets %d-%d, fds %d-%d, peak RSS %d-%d kB, heap %d-%d B, heap per remote process after 8 B %d-%d B\n",
            n, lo["udp"], hi["udp"], lo["tcp"], hi["tcp"], lo["sockets"], hi["sockets"], lo["fds"], hi["fds"],
            lo["hwm_kb"], hi["hwm_kb"], lo["heap_large"], hi["heap_large"], lo["peer_bytes"], hi["peer_bytes"]
        for (h in host_n) {
            printf "host netns:[%s]: %d ranks, their UDP sockets %d (namespace table: %d)\n", h, host_n[h], host_udp[h], host_ns[h]
            if (host_n[h] != ppn) bad = 1
        }
        exit bad
    }' "$LOG" || fail "ranks not spread $PPN to a host"

# Nothing of the job may still run in any host.
left=""
IFS=, read -r -a HOSTS <<<"$FAULT_HOSTS"
for h in "${HOSTS[@]}"; do
    left="$left$(ip netns pids "$h" 2>/dev/null | tr '\n' ' ')"
done
[ -z "$left" ] || fail "processes left in the test hosts: $left"
echo "ok   scale all-to-all $HOSTS_N x $PPN"
