#!/bin/bash
# tmx-perf runs every test it offers, over shm and udp, briefly and with
# every payload checked (-c): a crash, a hang (tmxrun's timeout), a
# corrupt payload or a row missing from its output fails.
# Values out of range (overflowing ones too) exit 2, naming the option.
# Both directions at once at the smallest bound on unexpected memory
# (TMX_UNEXPECTED_MAX=1: every message past the first waits where its
# sender put it until a receive takes it) must not deadlock: a
# rendezvous header in front of the FINs both sides wait for once hung
# one run in two. A datagram size too small (TMX_UDP_MTU=100) is raised,
# with a warning.
#   usage: perf_smoke.sh PATH/TO/tmxrun PATH/TO/tmx-perf
set -u
TMXRUN=$1 PERF=$2
fail=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for args in "-n 99999999999999999999" "-n 1000000001" "-n 0" "-n 5x" "-w 4294967297" "-w 4097" \
    "-w 0" "-s 18014398509481985k" "-s 4194305k" "-s 4097m" "-s 1,,x" "-t foo"; do
    # shellcheck disable=SC2086 # the words are the arguments
    "$PERF" $args >"$out" 2>&1
    rc=$?
    if [ "$rc" = 2 ] && grep -q "^tmx-perf: ${args%% *} '" "$out" && grep -q '^usage:' "$out"; then
        echo "ok: tmx-perf $args refused"
    else
        echo "FAIL: tmx-perf $args: exit status $rc, expected 2 with a message naming ${args%% *}:"
        cat "$out"
        fail=1
    fi
done
for x in shm udp; do
    for t in lat bw bibw rate overlap wake; do
        case $t in
        lat) sizes=0,1,8k,100k want="lat lat_p50 lat_p99" ;;
        wake) sizes=0,8k,100k want=wake ;;
        overlap) sizes=64k,300k want="overlap xfer total" ;;
        rate) sizes=8 want=rate ;;
        *) sizes=1,8k,100k want=$t ;;
        esac
        if ! TMX_TRANSPORTS=self,$x "$TMXRUN" -n 2 --timeout 60 "$PERF" -t "$t" -s "$sizes" -n 20 -w 8 -x "$x" -c \
            --csv >"$out" 2>&1; then
            echo "FAIL: tmx-perf -t $t -x $x exited non-zero:"
            cat "$out"
            fail=1
            continue
        fi
        for w in $want; do
            n=$(grep -c "^$w,$x," "$out")
            if [ "$n" != "$(echo "$sizes" | tr ',' '\n' | wc -l)" ]; then
                echo "FAIL: tmx-perf -t $t -x $x: $n rows of $w, one per size expected:"
                cat "$out"
                fail=1
            fi
        done
        [ "$fail" = 0 ] && echo "ok: tmx-perf -t $t -x $x"
    done
done
for x in shm udp; do
    for i in 1 2 3 4; do
        if ! TMX_UNEXPECTED_MAX=1 TMX_TRANSPORTS=self,$x "$TMXRUN" -n 2 --timeout 60 "$PERF" -t bibw \
            -s 1,4k,64k,1m -n 100 -w 256 -x "$x" -c >"$out" 2>&1; then
            echo "FAIL: tmx-perf -t bibw -x $x at TMX_UNEXPECTED_MAX=1 (run $i) hung or failed:"
            tail -n 20 "$out"
            fail=1
            break
        fi
    done
    [ "$i" = 4 ] && echo "ok: tmx-perf -t bibw -x $x at the smallest bound on unexpected memory, 4 runs"
done
# A datagram size below the smallest that carries a priority datagram is
# raised to it, with a warning, and payloads of many datagrams still arrive.
if TMX_UDP_MTU=100 TMX_TRANSPORTS=self,udp "$TMXRUN" -n 2 --timeout 60 "$PERF" -t bw -s 1,100k -n 20 -w 8 \
    -x udp -c --csv >"$out" 2>&1 && grep -q "TMX_UDP_MTU 100 is below the minimum: using 540" "$out" &&
    [ "$(grep -c '^bw,udp,' "$out")" = 2 ]; then
    echo "ok: TMX_UDP_MTU=100 raised to 540, with a warning"
else
    echo "FAIL: TMX_UDP_MTU=100: no warning of its raise, or the run failed:"
    tail -n 20 "$out"
    fail=1
fi
exit $fail
