#!/bin/bash
# A job whose ranks are all killed leaves no table of its shared UDP port
# in /dev/shm (docs/udp.md, "Cleaning up"): tmxrun removes it once the
# ranks are gone (tmx_host_sweep).
#   usage: sweep_test.sh PATH/TO/tmxrun PATH/TO/mp_test
# The job runs in a network namespace of its own, whose inode names its
# tables, so that jobs running beside it do not count. Needs root (unshare
# -n); skips (77) without it.
set -u
TMXRUN=$1
MP_TEST=$2

if [ "$(id -u)" -ne 0 ] || ! unshare -n true 2>/dev/null; then
    echo "SKIP: needs root to make a network namespace (unshare -n)"
    exit 77
fi

# In the namespace: loopback up, then a 2-rank udp job whose rank 1 stops
# calling tmx; tmxrun's time limit kills both (SIGTERM, then SIGKILL).
# Prints the namespace's inode and which of its tables exist while the job
# runs and after tmxrun returned.
OUT=$(unshare -n bash -c '
    ip link set lo up || exit 2
    ns=$(printf %x "$(stat -L -c %i /proc/self/ns/net)")
    echo "ns $ns"
    TMX_TRANSPORTS=self,udp MP_BUSY_S=60 "$1" -n 2 --timeout 3 "$2" busy >/dev/null 2>&1 &
    job=$!
    seen=""
    for _ in $(seq 50); do
        seen=$(ls /dev/shm 2>/dev/null | grep "^tmx-udp-$ns-" || true)
        [ -n "$seen" ] && break
        sleep 0.1
    done
    echo "during ${seen:-none}"
    wait $job
    echo "rc $?"
    echo "after $(ls /dev/shm 2>/dev/null | grep "^tmx-udp-$ns-" | tr "\n" " ")"
' sweep "$TMXRUN" "$MP_TEST")
echo "$OUT"

FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
grep -q '^during tmx-udp-' <<<"$OUT" || fail "the job never made its node table (does it share a port?)"
RC=$(sed -n 's/^rc //p' <<<"$OUT")
[ "$RC" != 0 ] || fail "tmxrun exited 0; the ranks were to be killed"
LEFT=$(sed -n 's/^after //p' <<<"$OUT" | tr -d ' ')
if [ -n "$LEFT" ]; then
    fail "the killed job left its table: $LEFT"
    NS=$(sed -n 's/^ns //p' <<<"$OUT")
    [ -n "$NS" ] && rm -f /dev/shm/tmx-udp-"$NS"-*
fi
[ $FAILS -eq 0 ] && echo "ok: the table of the killed job was removed"
exit $((FAILS != 0))
