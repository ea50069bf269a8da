#!/usr/bin/env bash
# bench/udp.sh - side-by-side benchmark of tmx's udp transport between two
# test hosts (issue "udp").
#
# Makes two hosts out of network namespaces, each joined by a veth pair to a
# bridge in the root namespace (as tests/fault/hosts.sh does), and measures,
# in interleaved rounds, a server/rank 0 in host 1 on core 0 talking to a
# client/rank 1 in host 2 on core 1:
#   tmx        tmxrun --hosts H1,H2 ... tmx-perf -x udp (lat, bw; size sweeps)
#   rxd        fi_pingpong -p "udp;ofi_rxd" (libfabric's reliable datagrams over UDP)
#   rxm        fi_pingpong -p "tcp;ofi_rxm" (libfabric over TCP)
#   UCX        ucx_perftest tag_lat / tag_bw, UCX_TLS=tcp
#   limits     raw UDP ping-pong (spinning and blocking) and raw UDP streams
#              (bench/limits/udp_pingpong.c, udp_stream.c)
#   loss       tmx and rxd with 0, 1 and 5 % of the UDP datagrams that either
#              host sends dropped by the kernel (nft), TCP spared; rxd's
#              latency percentiles from bench/limits/fi_lat.c
# plus a memcpy calibration figure at the start of every round.
#
# Writes results/udp.md, results/udp.png and results/raw/udp/ (see
# bench/README.md). Usage: bench/udp.sh [-r ROUNDS] [--quick] [-h]
# Needs root (network namespaces, nft). Shares its helpers with shm.sh
# through bench/lib.sh.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: bench/udp.sh [-r ROUNDS] [--quick] [--no-wait] [--no-install] [--no-build] [-o DIR]
  -r ROUNDS     interleaved rounds (default 3); every round runs every system once
  --quick       1 round, 1/10 of the iterations, sweep at powers of 4; writes to
                results/quick/ unless -o is given (a smoke test, not a result)
  --no-wait     do not wait for other processes to leave cores 0 and 1 before each
                step (by default it waits up to 20 s per step, 180 s per run in all)
  --no-install  do not apt-get install missing tools (fail if any is missing)
  --no-build    use the existing build/release binaries as they are
  -o DIR        output folder (default bench/results)
Needs root: it makes two network namespaces, a bridge and nft rules, and
removes them on exit.
EOF
}

BENCH=udp
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
bench_args "$@"
[ "$(id -u)" = 0 ] || { echo "udp.sh: needs root (network namespaces, nft)" >&2; exit 1; }
bench_init
bench_need "ucx_perftest fi_pingpong gnuplot taskset gcc cmake ip nft" \
    ucx-utils libfabric-bin gnuplot-nox util-linux gcc cmake make iproute2 nftables
bench_build memcpy_bw udp_pingpong udp_stream
gcc -O2 -Wall -o "$LIM/fi_lat" "$HERE/limits/fi_lat.c" -lfabric ||
    { echo "udp.sh: building bench/limits/fi_lat.c failed (libfabric-dev?)" >&2; exit 1; }
# tmx is being worked on while this runs: the whole run uses copies of the
# binaries as they were now (tmx-perf links libtmx statically), so a rebuild
# in build/release halfway through cannot mix two versions into one report.
TMX_BUILT=$(date -r "$PERF" '+%F %T %Z')
TMX_GIT="$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo "?") $(cd "$ROOT" && git status --porcelain --untracked-files=no 2>/dev/null | wc -l)"
mkdir -p "$TMP/bin"
cp "$PERF" "$TMXRUN" "$TMP/bin/"
PERF=$TMP/bin/tmx-perf TMXRUN=$TMP/bin/tmxrun

# ------------------------------------------------------------- test hosts
# Two hosts made by tests/fault/hosts.sh, as the fault tests make them:
# namespaces $NS1 and $NS2, each with eth0 (a veth whose other end is in a
# bridge of the root namespace) at .1 and .2 of a free /24; the bridge has
# .254, where tmxrun's key-value service listens. Unique names (the pid),
# removed on exit by the trap, with whatever still runs inside.
FAULT_PREFIX="tmxub$$"
# shellcheck source=../tests/fault/hosts.sh
. "$ROOT/tests/fault/hosts.sh" || exit 1
NS1=$FAULT_PREFIX-h1 NS2=$FAULT_PREFIX-h2 BR=$FAULT_BR
IP1=$FAULT_NET.1 IP2=$FAULT_NET.2 KVS=$FAULT_KVS
HOSTS_UP=0
bench_cleanup_extra() { [ "$HOSTS_UP" = 0 ] || fault_hosts_down; }
hosts_up() {
    HOSTS_UP=1
    fault_hosts_up 2 || exit 1
}

# ------------------------------------------------------------------- sizes
# (sweeps at powers of 4: every fi_pingpong pair costs ~1 s of start-up and
# teardown, so powers of 2 would add a minute per round)
if [ "$QUICK" = 1 ]; then
    DIV=10
    SWEEP="1 16 256 4096 65536 1048576 4194304"
    STREAM_S=0.5
else
    DIV=1
    SWEEP="1 4 16 64 256 1024 4096 16384 65536 262144 1048576 4194304"
    STREAM_S=1
fi
WINDOW=64                # tmx-perf's default -w, and UCX's -O
it() { local n=$(($1 / DIV)); [ $n -ge 20 ] && echo $n || echo 20; }
wins() { echo $((($1 + WINDOW - 1) / WINDOW * WINDOW)); } # whole windows (tmx-perf sends whole windows)
# Iterations per size in the sweeps, the same for every system: about 32 MiB
# each way for a ping-pong, 128 MiB for a stream (tmx-perf's own default,
# 1 GiB, takes minutes over UDP), at most 10000 round trips / 20000 messages
# (many round trips at small sizes, since fi_pingpong's timed loop includes
# the connection setup of its first message).
sweep_iters() { # lat|bw SIZE
    awk -v t="$1" -v s="$2" -v d="$DIV" -v w="$WINDOW" 'BEGIN {
        if (t == "lat") { n = int(33554432 / (s + 1024)); if (n > 10000) n = 10000 }
        else { n = int(134217728 / (s + 1024)); if (n > 20000) n = 20000 }
        n = int(n / d); if (n < 20) n = 20
        if (t == "bw") n = int((n + w - 1) / w) * w
        print n }'
}
N_LAT8=$(it 50000)       # 8 B ping-pong round trips
N_LAT64K=$(it 1000)      # 64 KiB ping-pong round trips
N_LAT1M=$(it 100)        # 1 MiB ping-pong round trips
N_BW64K=$(wins "$(it 4096)") # 64 KiB streamed messages
N_BW1M=$(wins "$(it 512)")   # 1 MiB streamed messages
N_PP=$(it 100000)        # raw UDP ping-pong round trips (spinning; blocking gets half)
# under loss: enough round trips for a 99th percentile
LOSS_LAT8=$([ "$QUICK" = 1 ] && echo 1000 || echo 5000)
LOSS_LAT8_FI=$LOSS_LAT8
LOSS_LAT1M=$([ "$QUICK" = 1 ] && echo 10 || echo 40)
LOSS_W=16                # tmx-perf -w under loss: 1 warm-up window + LOSS_BW / LOSS_W measured
LOSS_BW=$([ "$QUICK" = 1 ] && echo 16 || echo 32)
LOSS_TO=$([ "$QUICK" = 1 ] && echo 30 || echo 60)
LOSS_TO_FI=20            # rxd takes ~2 s at 5 %, unless it hangs (seen: a storm of retransmissions)
LOSS_PCTS="0 1 5"
STREAMS="1472 8972 65000"
GSO_SEND=64768           # 44 x 1472: one GSO send, cut into 1472-byte datagrams
export FI_UDP_IFACE=eth0 FI_TCP_IFACE=eth0
export UCX_TLS=tcp UCX_NET_DEVICES=eth0 UCX_WARN_UNUSED_ENV_VARS=n

bench_staging
: >"$TMP/timeouts.txt"
timed_out() { printf '%s\t%s\t%s\t%s\n' "$ROUND" "$1" "$2" "$3" >>"$TMP/timeouts.txt"; } # SYSTEM METRIC SIZE

# ------------------------------------------------------------------ systems
TMXHOSTS=(--hosts "$NS1,$NS2" --agent 'ip netns exec {host}' --kvs-addr "$KVS" -n 2)
tmx_udp() { # FILE TIMEOUT tmx-perf args...: rank r on host r+1, core r
    local file=$1 to=$2; shift 2
    run "$file" "$TMXRUN" "${TMXHOSTS[@]}" --timeout "$to" -- "$HERE/pin_rank.sh" "$PERF" "$@" -x udp --csv
}
tmx_parse() { # FILE METRIC [PBWMETRIC] [SYSTEM]: csv rows -> records
    awk -F, -v m="$2" -v p="${3:-}" '$1 ~ /^(lat|bw)$/ && $2 == "udp" && NF == 6 {
        printf "%s\t%s\t%s\n", m, $3, $5
        if (p != "") printf "%s\t%s\t%.3f\n", p, $3, $3 / $5 }' "$1" |
        while IFS=$'\t' read -r m s v; do rec "${4:-tmx}" "$m" "$s" "$v"; done
}
tmx_one() { # FILE METRIC PBWMETRIC TIMEOUT tmx-perf args...: one run, parsed
    local f=$1 m=$2 p=$3 to=$4
    shift 4
    : >"$TMP/t1"
    tmx_udp "$TMP/t1" "$to" "$@"
    cat "$TMP/t1" >>"$f"
    if [ $RC != 0 ]; then
        fail tmx "$*" $RC "$f"
        return 1
    fi
    tmx_parse "$TMP/t1" "$m" "$p"
}
sys_tmx() {
    local f=$RAWNEW/r${ROUND}_tmx.txt sz
    tmx_one "$f" lat pbw "$TO" -t lat -s 8 -n "$N_LAT8" || true
    tmx_one "$f" lat pbw "$TO" -t lat -s 65536 -n "$N_LAT64K" || true
    tmx_one "$f" lat pbw "$TO" -t lat -s 1048576 -n "$N_LAT1M" || true
    tmx_one "$f" bw "" "$TO" -t bw -s 65536 -n "$N_BW64K" || true
    tmx_one "$f" bw "" "$TO" -t bw -s 1048576 -n "$N_BW1M" || true
    SWEEPING=1
    for sz in $SWEEP; do tmx_one "$f" swlat swpbw "$TO" -t lat -s "$sz" -n "$(sweep_iters lat "$sz")" || true; done
    for sz in $SWEEP; do tmx_one "$f" swbw "" "$TO" -t bw -s "$sz" -n "$(sweep_iters bw "$sz")" || true; done
    SWEEPING=0
}

# fi_pingpong: server in host 1 on core 0, client in host 2 on core 1 with
# the server's address; one pair per size. usec/xfer is one way.
fi_one() { # SYSTEM PROVIDER FILE SIZE ITERS METRIC PBWMETRIC [TIMEOUT]
    local y=$1 prov=$2 f=$3 s=$4 n=$5 m=$6 p=$7 to=${8:-$TO} spid crc
    next_port
    logcmd "ip netns exec $NS1 taskset -c 0 timeout $to fi_pingpong -p '$prov' -e rdm -m tagged -I $n -S $s -B $PORT  &  ip netns exec $NS2 taskset -c 1 timeout $to fi_pingpong -p '$prov' -e rdm -m tagged -I $n -S $s -P $PORT $IP1"
    start_bg "$TMP/fi_server.txt" ip netns exec "$NS1" taskset -c 0 timeout "$to" fi_pingpong -p "$prov" -e rdm -m tagged -I "$n" -S "$s" -B "$PORT"
    spid=$BG
    if ! wait_listen "$PORT" "$spid"; then
        kill -TERM "$spid" 2>/dev/null || true
        wait_bg "$spid"
        fail "$y" "server size $s" "$RC" "$f"
        return 1
    fi
    : >"$TMP/fi_client.txt"
    start_bg "$TMP/fi_client.txt" ip netns exec "$NS2" taskset -c 1 timeout "$to" fi_pingpong -p "$prov" -e rdm -m tagged -I "$n" -S "$s" -P "$PORT" "$IP1"
    wait_bg "$BG"
    crc=$RC
    [ $crc = 0 ] || kill -TERM "$spid" 2>/dev/null || true
    wait_bg "$spid"
    cat "$TMP/fi_client.txt" >>"$f"
    # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec; a result line counts
    # even if the client then failed to finish (seen under loss: rxd hanging at exit)
    awk -v s="$s" -v m="$m" -v p="$p" '$1 ~ /^[0-9]+(\.[0-9])?[kmg]?$/ && NF == 8 && $7 + 0 > 0 {
        printf "%s\t%s\t%s\n", m, s, $7; if (p != "") printf "%s\t%s\t%.3f\n", p, s, s / $7 }' "$TMP/fi_client.txt" >"$TMP/fi_rec"
    while IFS=$'\t' read -r m2 s2 v; do rec "$y" "$m2" "$s2" "$v"; done <"$TMP/fi_rec"
    if [ $crc != 0 ]; then
        if [ -s "$TMP/fi_rec" ]; then
            fail "$y" "$m size $s${LOSS_NOW:-} (after printing its result, which is kept)" "client $crc, server $RC" "$f"
        else
            fail "$y" "$m size $s${LOSS_NOW:-}" "client $crc, server $RC" "$f"
            # a client that loses its control connection (exit 104) when the server times out
            if [ $crc = 124 ] || [ $RC = 124 ]; then timed_out "$y" "$m" "$s"; fi
        fi
        return 1
    fi
}
fi_system() { # SYSTEM PROVIDER
    local y=$1 prov=$2 f=$RAWNEW/r${ROUND}_$1.txt s
    : >"$TMP/fi_server.txt"
    fi_one "$y" "$prov" "$f" 8 "$N_LAT8" lat pbw || true
    fi_one "$y" "$prov" "$f" 65536 "$N_LAT64K" lat pbw || true
    fi_one "$y" "$prov" "$f" 1048576 "$N_LAT1M" lat pbw || true
    SWEEPING=1
    for s in $SWEEP; do fi_one "$y" "$prov" "$f" "$s" "$(sweep_iters lat "$s")" swlat swpbw || true; done
    SWEEPING=0
    cat "$TMP/fi_server.txt" >"$RAWNEW/r${ROUND}_${y}_server.txt"
}
sys_rxd() { fi_system rxd "udp;ofi_rxd"; }

# bench/limits/fi_lat: the same tagged ping-pong as fi_pingpong, timing every
# round trip, for the latency distribution fi_pingpong does not report.
fi_lat_one() { # SYSTEM PROVIDER FILE SIZE ITERS METRIC [TIMEOUT]: records METRIC (mean), METRICmed, METRICp99
    local y=$1 prov=$2 f=$3 s=$4 n=$5 m=$6 to=${7:-$TO} spid crc
    next_port
    logcmd "ip netns exec $NS1 taskset -c 0 timeout $to fi_lat -p '$prov' -B $PORT -s $s -n $n  &  ip netns exec $NS2 taskset -c 1 timeout $to fi_lat -p '$prov' -P $PORT -s $s -n $n $IP1"
    start_bg "$TMP/fl_server.txt" ip netns exec "$NS1" taskset -c 0 timeout "$to" "$LIM/fi_lat" -p "$prov" -B "$PORT" -s "$s" -n "$n"
    spid=$BG
    if ! wait_listen "$PORT" "$spid"; then
        kill -TERM "$spid" 2>/dev/null || true
        wait_bg "$spid"
        fail "$y" "fi_lat server size $s${LOSS_NOW:-}" "$RC" "$f"
        return 1
    fi
    : >"$TMP/fl_client.txt"
    start_bg "$TMP/fl_client.txt" ip netns exec "$NS2" taskset -c 1 timeout "$to" "$LIM/fi_lat" -p "$prov" -P "$PORT" -s "$s" -n "$n" "$IP1"
    wait_bg "$BG"
    crc=$RC
    [ $crc = 0 ] || kill -TERM "$spid" 2>/dev/null || true
    wait_bg "$spid"
    cat "$TMP/fl_client.txt" >>"$f"
    if [ $crc != 0 ]; then
        fail "$y" "fi_lat $m size $s${LOSS_NOW:-}" "client $crc, server $RC" "$f"
        [ $crc != 124 ] || timed_out "$y" "$m" "$s"
        return 1
    fi
    awk -v m="$m" -v s="$s" '/^fi_lat / { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        print m "\t" s "\t" v["mean_us"]; print m "med\t" s "\t" v["p50_us"]; print m "p99\t" s "\t" v["p99_us"] }' \
        "$TMP/fl_client.txt" | while IFS=$'\t' read -r m2 s2 v; do rec "$y" "$m2" "$s2" "$v"; done
}
sys_rxm() { fi_system rxm "tcp;ofi_rxm"; }

ucx_pair() { # NAME BATCHFILE: runs a batch (server host 1 core 0, client host 2 core 1), parses the client's CSV
    local name=$1 batch=$2 f=$RAWNEW/r${ROUND}_ucx_$1.txt fs=$RAWNEW/r${ROUND}_ucx_$1_server.txt
    local spid crc
    next_port
    cp "$batch" "$RAWNEW/ucx_$name.batch"
    logcmd "UCX_TLS=$UCX_TLS UCX_NET_DEVICES=$UCX_NET_DEVICES ip netns exec $NS1 taskset -c 0 timeout $TO ucx_perftest -b ucx_$name.batch -p $PORT  &  UCX_TLS=$UCX_TLS UCX_NET_DEVICES=$UCX_NET_DEVICES ip netns exec $NS2 taskset -c 1 timeout $TO ucx_perftest $IP1 -b ucx_$name.batch -p $PORT -v -f"
    start_bg "$fs" ip netns exec "$NS1" taskset -c 0 timeout "$TO" ucx_perftest -b "$batch" -p "$PORT"
    spid=$BG
    if ! wait_listen "$PORT" "$spid"; then
        kill -TERM "$spid" 2>/dev/null || true
        wait_bg "$spid"
        fail ucx "$name server" "$RC" "$fs"
        return
    fi
    start_bg "$f" ip netns exec "$NS2" taskset -c 1 timeout "$TO" ucx_perftest "$IP1" -b "$batch" -p "$PORT" -v -f
    wait_bg "$BG"
    crc=$RC
    [ $crc = 0 ] || kill -TERM "$spid" 2>/dev/null || true
    wait_bg "$spid"
    [ $crc = 0 ] || fail ucx "$name" "$crc" "$f"
    # label,iterations,typical_lat,avg_lat,overall_lat,avg_bw,overall_bw(MiB/s),avg_mr,overall_mr
    awk -F, '$1 ~ /^[a-z0-9]+_[0-9]+$/ && NF == 9 {
        split($1, a, "_"); t = a[1]; s = a[2]
        if (t == "lat" || t == "swlat") {
            print t "\t" s "\t" $5
            if (t == "lat") print "lattyp\t" s "\t" $3
            print (t == "lat" ? "pbw" : "swpbw") "\t" s "\t" sprintf("%.3f", s / $5)
        } else if (t == "bw" || t == "swbw") {
            print t "\t" s "\t" sprintf("%.3f", $7 * 1.048576)
        } }' "$f" | while IFS=$'\t' read -r m s v; do rec ucx "$m" "$s" "$v"; done
}
sys_ucx() {
    local b=$TMP/ucx.batch s n
    {
        printf 'lat_8 -t tag_lat -s 8 -n %s -w %s\n' "$N_LAT8" $((N_LAT8 / 10))
        printf 'lat_65536 -t tag_lat -s 65536 -n %s -w %s\n' "$N_LAT64K" $((N_LAT64K / 10 + 1))
        printf 'lat_1048576 -t tag_lat -s 1048576 -n %s -w %s\n' "$N_LAT1M" $((N_LAT1M / 10 + 1))
        printf 'bw_65536 -t tag_bw -s 65536 -n %s -w %s -O %s\n' "$N_BW64K" $((N_BW64K / 10 + 1)) $WINDOW
        printf 'bw_1048576 -t tag_bw -s 1048576 -n %s -w %s -O %s\n' "$N_BW1M" $((N_BW1M / 10 + 1)) $WINDOW
    } >"$b"
    ucx_pair main "$b"
    b=$TMP/ucxsweep.batch
    : >"$b"
    for s in $SWEEP; do
        n=$(sweep_iters lat "$s")
        printf 'swlat_%s -t tag_lat -s %s -n %s -w %s\n' "$s" "$s" "$n" $((n / 10 + 1)) >>"$b"
    done
    for s in $SWEEP; do
        n=$(sweep_iters bw "$s")
        printf 'swbw_%s -t tag_bw -s %s -n %s -w %s -O %s\n' "$s" "$s" "$n" $((n / 10 + 1)) $WINDOW >>"$b"
    done
    SWEEPING=1
    ucx_pair sweep "$b"
    SWEEPING=0
}

# Waits until FILE has a line matching PATTERN while pid $3 lives.
wait_line() {
    local i
    for i in $(seq 200); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}
limits_pingpong() { # FILE MODE(spin|conn|blocking) ITERS; conn: spinning, the server connected too
    local f=$1 mode=$2 n=$3 b="" C="" spid crc port
    [ "$mode" = blocking ] && b=-b
    [ "$mode" = conn ] && C=-C
    next_port
    port=$PORT
    : >"$TMP/pp_server.txt"
    logcmd "ip netns exec $NS1 timeout $TO udp_pingpong server $port -c 0 $b $C  &  ip netns exec $NS2 timeout $TO udp_pingpong client $IP1 $port -c 1 -s 8 -n $n $b"
    start_bg "$TMP/pp_server.txt" ip netns exec "$NS1" timeout "$TO" "$LIM/udp_pingpong" server "$port" -c 0 $b $C
    spid=$BG
    if ! wait_line "$TMP/pp_server.txt" "server ready" "$spid"; then
        kill -TERM "$spid" 2>/dev/null || true
        wait_bg "$spid"
        fail limits "udp ping-pong $mode (server)" "$RC" "$f"
        return
    fi
    : >"$TMP/pp_client.txt"
    start_bg "$TMP/pp_client.txt" ip netns exec "$NS2" timeout "$TO" "$LIM/udp_pingpong" client "$IP1" "$port" -c 1 -s 8 -n "$n" $b
    wait_bg "$BG"
    crc=$RC
    [ $crc = 0 ] || kill -TERM "$spid" 2>/dev/null || true
    wait_bg "$spid"
    cat "$TMP/pp_client.txt" "$TMP/pp_server.txt" >>"$f"
    [ $crc = 0 ] || { fail limits "udp ping-pong $mode" "$crc" "$f"; return; }
    awk -v y="udp$mode" '/^udp_pingpong mode=/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        print y "\tlat\t" v["size"] "\t" v["oneway_us_mean"]
        print y "\tlatmed\t" v["size"] "\t" v["oneway_us_median"]
        print y "\tlatp99\t" v["size"] "\t" v["oneway_us_p99"] }' "$TMP/pp_client.txt" |
        while IFS=$'\t' read -r y m s v; do rec "$y" "$m" "$s" "$v"; done
}
limits_stream() { # FILE SYSTEM SIZE [SEGMENT [GRO]]: receiver host 1 core 0, sender host 2 core 1
    local f=$1 y=$2 s=$3 seg=${4:-0} gro=${5:-} rpid crc port g="" G="" x
    [ "$seg" = 0 ] || g="-g $seg"
    [ -z "$gro" ] || G=-G
    next_port
    port=$PORT
    : >"$TMP/st_recv.txt"
    logcmd "ip netns exec $NS1 timeout $TO udp_stream recv $port $STREAM_S -c 0 $G  &  ip netns exec $NS2 timeout $TO udp_stream send $IP1 $port $s $(awk -v t="$STREAM_S" 'BEGIN { print t + 0.5 }') -c 1 $g"
    start_bg "$TMP/st_recv.txt" ip netns exec "$NS1" timeout "$TO" "$LIM/udp_stream" recv "$port" "$STREAM_S" -c 0 $G
    rpid=$BG
    if ! wait_line "$TMP/st_recv.txt" "recv ready" "$rpid"; then
        kill -TERM "$rpid" 2>/dev/null || true
        wait_bg "$rpid"
        fail limits "udp stream $y $s (receiver)" "$RC" "$f"
        return
    fi
    : >"$TMP/st_send.txt"
    start_bg "$TMP/st_send.txt" ip netns exec "$NS2" timeout "$TO" "$LIM/udp_stream" send "$IP1" "$port" "$s" \
        "$(awk -v t="$STREAM_S" 'BEGIN { print t + 0.5 }')" -c 1 $g
    wait_bg "$BG"
    crc=$RC
    wait_bg "$rpid"
    cat "$TMP/st_recv.txt" "$TMP/st_send.txt" >>"$f"
    [ $crc = 0 ] && [ $RC = 0 ] || { fail limits "udp stream $y $s" "$crc/$RC" "$f"; return; }
    x=$s
    [ "$seg" = 0 ] || x=$seg
    awk -v y="$y" -v s="$x" '/^udp_stream recv seconds=/ { for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        print y "\tbw\t" s "\t" v["goodput_MBps"] }' "$TMP/st_recv.txt" |
        while IFS=$'\t' read -r y m s v; do rec "$y" "$m" "$s" "$v"; done
}
sys_limits() {
    local f=$RAWNEW/r${ROUND}_limits.txt s
    limits_pingpong "$f" spin "$N_PP"
    limits_pingpong "$f" conn "$N_PP"
    limits_pingpong "$f" blocking $((N_PP / 2))
    for s in $STREAMS; do limits_stream "$f" udpstream "$s"; done
    limits_stream "$f" udpgso "$GSO_SEND" 1472
    limits_stream "$f" udpgsogro "$GSO_SEND" 1472 gro
}

# Under loss: tmx (lat 8 B, lat 1 MiB, bw 1 MiB) and rxd (lat 8 B, lat 1 MiB)
# with 0, 1 and 5 % of the UDP datagrams both hosts send dropped by nft.
# Metrics carry the size in the name; the "size" field is the loss percent.
loss_level() { # PERCENT
    local pct=$1 f=$RAWNEW/r${ROUND}_loss.txt ns c1 c2 order k
    echo "=== drop $pct % of UDP datagrams sent by each host" >>"$f"
    if [ "$pct" != 0 ]; then
        for ns in "$NS1" "$NS2"; do
            fault_nft_clear "$ns"
            fault_nft_drop "$ns" "$pct" || fail loss "nft rule $pct %" $? "$f"
        done
        logcmd "ip netns exec NS nft -f - (table inet tmxudpbench: meta l4proto udp numgen random mod 100 < $pct drop, in both hosts)"
    fi
    LOSS_NOW=" at $pct % UDP loss"
    order="tmx rxd"
    [ $((ROUND % 2)) = 1 ] || order="rxd tmx"
    for k in $order; do
        if [ $k = tmx ]; then
            : >"$TMP/t1"
            tmx_udp "$TMP/t1" "$LOSS_TO" -t lat -s 8 -n "$LOSS_LAT8"
            cat "$TMP/t1" >>"$f"
            if [ $RC = 0 ]; then
                tmx_parse "$TMP/t1" loss_lat8
                awk -F, '$1 ~ /^lat_p(50|99)$/ && NF == 6 { sub(/^lat_p50$/, "loss_lat8med", $1); sub(/^lat_p99$/, "loss_lat8p99", $1); printf "%s\t%s\t%s\n", $1, $3, $5 }' "$TMP/t1" |
                    while IFS=$'\t' read -r m2 s2 v; do rec tmx "$m2" "$s2" "$v"; done
            else fail tmx "lat 8 at $pct % loss" $RC "$f"; [ $RC != 124 ] || timed_out tmx loss_lat8 "$pct"; fi
            : >"$TMP/t1"
            tmx_udp "$TMP/t1" "$LOSS_TO" -t lat -s 1m -n "$LOSS_LAT1M"
            cat "$TMP/t1" >>"$f"
            if [ $RC = 0 ]; then tmx_parse "$TMP/t1" loss_lat1m loss_pbw1m; else fail tmx "lat 1m at $pct % loss" $RC "$f"; [ $RC != 124 ] || timed_out tmx loss_lat1m "$pct"; fi
            : >"$TMP/t1"
            tmx_udp "$TMP/t1" "$LOSS_TO" -t bw -s 1m -n "$LOSS_BW" -w "$LOSS_W"
            cat "$TMP/t1" >>"$f"
            if [ $RC = 0 ]; then tmx_parse "$TMP/t1" loss_bw1m; else fail tmx "bw 1m at $pct % loss" $RC "$f"; [ $RC != 124 ] || timed_out tmx loss_bw1m "$pct"; fi
        else
            : >"$TMP/fi_server.txt"
            fi_one rxd "udp;ofi_rxd" "$f" 8 "$LOSS_LAT8_FI" loss_lat8 "" "$LOSS_TO_FI" || true
            fi_one rxd "udp;ofi_rxd" "$f" 1048576 "$LOSS_LAT1M" loss_lat1m loss_pbw1m "$LOSS_TO_FI" || true
            fi_lat_one rxd "udp;ofi_rxd" "$f" 8 "$LOSS_LAT8_FI" loss_fl8 "$LOSS_TO_FI" || true
            cat "$TMP/fi_server.txt" >>"$RAWNEW/r${ROUND}_loss_rxd_server.txt"
        fi
    done
    # the size field of these records is the loss percent, not the message size
    awk -F'\t' -v OFS='\t' -v r="$ROUND" -v p="$pct" '$1 == r && $3 ~ /^loss_/ && $4 !~ /^p/ { $4 = p } { print }' \
        "$TMP/timeouts.txt" >"$TMP/to.fix"
    mv "$TMP/to.fix" "$TMP/timeouts.txt"
    awk -F'\t' -v OFS='\t' -v r="$ROUND" -v p="$pct" '$1 == r && $3 ~ /^loss_/ && $4 !~ /^p/ { $4 = "p" p } { print }' "$DATA" >"$TMP/data.fix"
    mv "$TMP/data.fix" "$DATA"
    if [ "$pct" != 0 ]; then
        read -r c1 c2 <<<"$(fault_nft_counts "$NS1")"
        read -r s1 s2 <<<"$(fault_nft_counts "$NS2")"
        echo "nft: host 1 sent $c1 UDP datagrams, dropped $c2; host 2 sent $s1, dropped $s2" >>"$f"
        awk -v a="$c1" -v b="$c2" -v c="$s1" -v d="$s2" 'BEGIN { if (a + c > 0) printf "%.3f\n", 100 * (b + d) / (a + c) }' |
            while read -r v; do rec nft dropped "p$pct" "$v"; done
        for ns in "$NS1" "$NS2"; do fault_nft_clear "$ns"; done
    fi
    LOSS_NOW=""
}
sys_loss() {
    local pct
    for pct in $LOSS_PCTS; do loss_level "$pct"; done
}

# ------------------------------------------------------------------- rounds
hosts_up
{
    echo "host 1: $NS1, eth0 $IP1/24; host 2: $NS2, eth0 $IP2/24; bridge $BR $KVS/24 in the root namespace"
    ip -n "$NS1" -d link show eth0
    ip -n "$NS1" addr show eth0
    ip -n "$NS2" addr show eth0
    ip -d link show "$BR"
    echo "ethtool-like offloads of host 1's eth0:"
    ip netns exec "$NS1" sh -c 'command -v ethtool >/dev/null && ethtool -k eth0 | grep -E "segmentation|receive-offload|checksumming"' || echo "(ethtool not installed)"
    echo "tmx binaries (copied from build/release/tools at the start of the run; built $TMX_BUILT):"
    (cd "$TMP/bin" && sha256sum tmx-perf tmxrun)
} >"$RAWNEW/hosts.txt" 2>&1
MTU=$(ip -n "$NS1" link show eth0 | awk '/mtu/ { for (i = 1; i <= NF; i++) if ($i == "mtu") print $(i + 1) }')
START=$(date '+%F %T %Z')
T0=$(date +%s)
SYSTEMS=(limits tmx rxd rxm ucx loss)
log "output: $OUT (rounds: $ROUNDS$([ "$QUICK" = 1 ] && echo ', quick')); hosts $NS1 ($IP1), $NS2 ($IP2)"
bench_rounds "${SYSTEMS[@]}"
END=$(date '+%F %T %Z')
ELAPSED=$(($(date +%s) - T0))
cp "$DATA" "$RAWNEW/data.tsv"
cp "$TMP/timeouts.txt" "$RAWNEW/timeouts.tsv"

# --------------------------------------------------------------- statistics
bench_stats
to_rounds() { awk -F'\t' -v y="$1" -v m="$2" -v s="$3" '$2 == y && $3 == m && $4 == s { n++ } END { print n + 0 }' "$TMP/timeouts.txt"; }

# -------------------------------------------------------------------- plot
for y in tmx rxd rxm ucx; do
    for m in swlat swbw swpbw; do
        awk -F'\t' -v y="$y" -v m="$m" '$1 == y && $2 == m { print $3, $5 }' "$TMP/stats.tsv" | sort -n >"$TMP/p_${y}_$m.dat"
    done
done
awk -F'\t' '$1 == "udpstream" && $2 == "bw" { print $3, $5 }' "$TMP/stats.tsv" | sort -n >"$TMP/p_udpstream.dat"
SPIN_US=$(med udpspin lat 8)
BLOCK_US=$(med udpblocking lat 8)
CONN_US=$(med udpconn lat 8)
GSO_MBS=$(med udpgso bw 1472)
GRO_MBS=$(med udpgsogro bw 1472)
{
    echo "set terminal pngcairo noenhanced size 1600,720 font 'DejaVu Sans,10'"
    echo "set output '$RAWNEW/udp.png'"
    echo "set multiplot layout 1,2 title 'UDP between two network namespaces (veth + bridge, MTU $MTU) on $(hostname): tmx vs libfabric vs UCX, cores 0 and 1, median of $ROUNDS round(s), $(date +%F)$([ "$QUICK" = 1 ] && echo ' (QUICK RUN)')'"
    echo "set logscale xy; set grid xtics ytics lc rgb '#dddddd'"
    echo "set xtics ('1' 1, '16' 16, '256' 256, '4K' 4096, '64K' 65536, '1M' 1048576, '4M' 4194304)"
    echo "set xlabel 'message size (bytes)'; set xrange [0.7:4194304*1.5]"
    echo "set style line 1 lc rgb '#d62728' lw 2.5 pt 7 ps 0.6"
    echo "set style line 2 lc rgb '#ff7f0e' lw 2 pt 5 ps 0.6"
    echo "set style line 3 lc rgb '#2ca02c' lw 2 pt 9 ps 0.7"
    echo "set style line 4 lc rgb '#1f77b4' lw 2 pt 11 ps 0.7"
    echo "set title 'latency, one way (lower is better)'; set ylabel 'microseconds'; set key top left box opaque"
    SEP=""
    printf "plot "
    series "$TMP/p_tmx_swlat.dat" "u 1:2 w lp ls 1 t 'tmx udp (tmx-perf -t lat)'"
    series "$TMP/p_rxd_swlat.dat" "u 1:2 w lp ls 2 t 'libfabric udp;ofi_rxd (fi_pingpong)'"
    series "$TMP/p_rxm_swlat.dat" "u 1:2 w lp ls 3 t 'libfabric tcp;ofi_rxm (fi_pingpong)'"
    series "$TMP/p_ucx_swlat.dat" "u 1:2 w lp ls 4 t 'UCX tcp (ucx_perftest tag_lat, mean)'"
    if [ -n "$SPIN_US" ]; then printf "%s%s w l dt 3 lc rgb 'black' lw 1.5 t 'raw UDP ping-pong 8 B, spinning (limit)'" "$SEP" "$SPIN_US"; SEP=", "; fi
    if [ -n "$BLOCK_US" ]; then printf "%s%s w l dt 2 lc rgb 'gray40' lw 1.5 t 'raw UDP ping-pong 8 B, blocking'" "$SEP" "$BLOCK_US"; SEP=", "; fi
    echo
    echo "set title 'bandwidth (higher is better): solid = streaming, dashed = ping-pong (size / one-way time)'"
    echo "set ylabel 'MB/s (10^6 B/s)'; set key bottom right box opaque"
    SEP=""
    printf "plot "
    series "$TMP/p_tmx_swbw.dat" "u 1:2 w lp ls 1 t 'tmx streaming (-t bw, window $WINDOW)'"
    series "$TMP/p_ucx_swbw.dat" "u 1:2 w lp ls 4 t 'UCX tcp streaming (tag_bw -O $WINDOW)'"
    series "$TMP/p_tmx_swpbw.dat" "u 1:2 w lp ls 1 dt 2 t 'tmx ping-pong'"
    series "$TMP/p_rxd_swpbw.dat" "u 1:2 w lp ls 2 dt 2 t 'rxd ping-pong'"
    series "$TMP/p_rxm_swpbw.dat" "u 1:2 w lp ls 3 dt 2 t 'tcp;rxm ping-pong'"
    series "$TMP/p_ucx_swpbw.dat" "u 1:2 w lp ls 4 dt 2 t 'UCX tcp ping-pong'"
    series "$TMP/p_udpstream.dat" "u 1:2 w p pt 6 ps 2.2 lw 2 lc rgb 'black' t 'raw UDP stream, goodput at the datagram size (limit)'"
    if [ -n "$GSO_MBS" ]; then printf "%s%s w l dt 3 lc rgb 'black' lw 1.5 t 'raw UDP stream, 1472 B datagrams sent by GSO'" "$SEP" "$GSO_MBS"; SEP=", "; fi
    if [ -n "$GRO_MBS" ]; then printf "%s%s w l dt 2 lc rgb 'gray40' lw 1.5 t 'the same with GRO at the receiver'" "$SEP" "$GRO_MBS"; SEP=", "; fi
    echo
    echo "unset multiplot"
} >"$TMP/plot.gp"
sed "s#$TMP/#raw/#g" "$TMP/plot.gp" >"$RAWNEW/plot.gp"
gnuplot "$TMP/plot.gp" 2>"$TMP/gnuplot.err" || { cat "$TMP/gnuplot.err" >&2; fail gnuplot plot 1 "$RAWNEW/plot.gp"; }

# ------------------------------------------------------------------- report
MD=$TMP/udp.md
lossrow() { # LABEL SYSTEM METRIC PCT KIND: like row, for a loss figure, with timeouts noted
    local med min max list t note=""
    med=$(st "$2" "$3" "p$4" med); min=$(st "$2" "$3" "p$4" min); max=$(st "$2" "$3" "p$4" max)
    list=$(st "$2" "$3" "p$4" list)
    t=$(to_rounds "$2" "$3" "$4")
    [ "$t" = 0 ] || note=" (+ $t round(s) with no result: timed out after $([ "$2" = tmx ] && echo "$LOSS_TO" || echo "$LOSS_TO_FI") s)"
    echo "| $1 | $4 % | **$(fmt "$5" "$med")** | $(fmt "$5" "$min") | $(fmt "$5" "$max") | $(fmtlist "$5" "$list")$note |"
}
lossmed() { st "$1" "$2" "p$3" med; }
pct_fmt() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.0f %%", 100 * a / b; else printf "n/a" }'; }
{
    echo "# UDP between two hosts: tmx vs libfabric (rxd, tcp;rxm) vs UCX (tcp)"
    echo
    [ "$QUICK" = 1 ] && echo "> **QUICK RUN** (1 round, 1/10 of the iterations): a smoke test of the script, not a result." && echo
    echo "Produced by \`bench/udp.sh$([ "$QUICK" = 1 ] && echo ' --quick')$([ "$ROUNDS" != 3 ] && [ "$QUICK" = 0 ] && echo " -r $ROUNDS")\` in one run: $START to $END ($((ELAPSED / 60)) min $((ELAPSED % 60)) s), $ROUNDS interleaved round(s)."
    echo
    echo "## Machine and test hosts"
    echo
    echo "| | |"
    echo "|---|---|"
    machine_rows
    echo "| libfabric | libfabric-bin $(pkgv libfabric-bin), providers \`udp;ofi_rxd\` and \`tcp;ofi_rxm\`, FI_UDP_IFACE=FI_TCP_IFACE=eth0 |"
    echo "| UCX | ucx-utils $(pkgv ucx-utils), UCX_TLS=tcp, UCX_NET_DEVICES=eth0 |"
    echo "| compiler | $(gcc --version | head -1) |"
    echo "| test hosts | two network namespaces (NS1, NS2), each with eth0, one end of a veth pair whose other end is in a bridge in the root namespace; $IP1/24 and $IP2/24, the bridge $KVS (tmxrun's key-value service); MTU $MTU; no netem, no qdisc beyond the default |"
    echo
    echo "Everything runs on this one 2-core machine: the \"network\" is the kernel moving packets from one"
    echo "namespace to the other (veth, bridge), in the sender's and receiver's system calls and softirqs,"
    echo "on the same two cores as the programs. So these figures measure the software path of each"
    echo "library plus the kernel's UDP or TCP stack, not a wire. TCP over veth profits from 64 KiB"
    echo "segments (TSO/GRO: no segmentation at MTU $MTU); UDP datagrams above $((MTU - 28)) bytes are cut into"
    echo "IP fragments."
    echo
    echo "The machine is shared and noisy, so every system runs once per round, rounds are interleaved, the"
    echo "order of systems rotates each round, and each table gives the **median over rounds** with min,"
    echo "max and every round's value. The calibration section at the end shows how much the machine"
    echo "moved and what else ran."
    echo
    echo "## Headline (median over rounds)"
    echo
    echo "| | tmx (udp) | libfabric udp;ofi_rxd | libfabric tcp;ofi_rxm | UCX tcp | raw UDP limit |"
    echo "|---|---|---|---|---|---|"
    echo "| latency 8 B, one way (us) | **$(fmt us "$(med tmx lat 8)")** | $(fmt us "$(med rxd lat 8)") | $(fmt us "$(med rxm lat 8)") | $(fmt us "$(med ucx lat 8)") (median sample $(fmt us "$(med ucx lattyp 8)")) | $(fmt us "$SPIN_US") spinning ($(fmt us "$CONN_US") both ends connected), $(fmt us "$BLOCK_US") blocking |"
    echo "| ping-pong bandwidth 64 KiB (MB/s) | **$(fmt mbs "$(med tmx pbw 65536)")** | $(fmt mbs "$(med rxd pbw 65536)") | $(fmt mbs "$(med rxm pbw 65536)") | $(fmt mbs "$(med ucx pbw 65536)") | |"
    echo "| ping-pong bandwidth 1 MiB (MB/s) | **$(fmt mbs "$(med tmx pbw 1048576)")** | $(fmt mbs "$(med rxd pbw 1048576)") | $(fmt mbs "$(med rxm pbw 1048576)") | $(fmt mbs "$(med ucx pbw 1048576)") | |"
    echo "| streaming bandwidth 64 KiB (MB/s) | **$(fmt mbs "$(med tmx bw 65536)")** | n/a (no streaming test) | n/a (no streaming test) | $(fmt mbs "$(med ucx bw 65536)") | $(fmt mbs "$(med udpstream bw 1472)") (1472 B datagrams), $(fmt mbs "$(med udpgso bw 1472)") (GSO), $(fmt mbs "$(med udpgsogro bw 1472)") (GSO+GRO) |"
    echo "| streaming bandwidth 1 MiB (MB/s) | **$(fmt mbs "$(med tmx bw 1048576)")** | n/a | n/a | $(fmt mbs "$(med ucx bw 1048576)") | same |"
    echo "| latency 8 B at 1 % UDP loss (us, mean) | **$(fmt us "$(lossmed tmx loss_lat8 1)")** | $(fmt us "$(lossmed rxd loss_lat8 1)") | | | |"
    echo "| latency 8 B at 5 % UDP loss (us, mean) | **$(fmt us "$(lossmed tmx loss_lat8 5)")** | $(fmt us "$(lossmed rxd loss_lat8 5)") | | | |"
    echo "| latency 8 B at 1 % UDP loss (us, 99th percentile) | **$(fmt us "$(lossmed tmx loss_lat8p99 1)")** | $(fmt us "$(lossmed rxd loss_fl8p99 1)") (fi_lat) | | | |"
    echo "| latency 8 B at 5 % UDP loss (us, 99th percentile) | **$(fmt us "$(lossmed tmx loss_lat8p99 5)")** | $(fmt us "$(lossmed rxd loss_fl8p99 5)") (fi_lat) | | | |"
    echo "| ping-pong bandwidth 1 MiB at 5 % loss (MB/s) | **$(fmt mbs "$(lossmed tmx loss_pbw1m 5)")** | $(fmt mbs "$(lossmed rxd loss_pbw1m 5)") | | | |"
    echo "| streaming bandwidth 1 MiB at 5 % loss (MB/s) | **$(fmt mbs "$(lossmed tmx loss_bw1m 5)")** (-w $LOSS_W) | n/a | | | |"
    echo
    echo "Streaming: the sender keeps $WINDOW messages in flight (tmx-perf -t bw, ucx_perftest tag_bw -O $WINDOW)."
    echo "Ping-pong bandwidth = size / one-way time of a ping-pong at that size: the only bandwidth"
    echo "fi_pingpong measures, so tmx's ratios against rxd and tcp;rxm use it (like for like)."
    echo
    echo "## Ratios tmx / other (of the medians)"
    echo
    echo "Latency: below 1 means tmx is faster. Bandwidth: above 1 means tmx is faster."
    echo
    echo "| metric | tmx/rxd | tmx/tcp;rxm | tmx/UCX-tcp | tmx/raw UDP |"
    echo "|---|---|---|---|---|"
    echo "| latency 8 B | $(ratio "$(med tmx lat 8)" "$(med rxd lat 8)") | $(ratio "$(med tmx lat 8)" "$(med rxm lat 8)") | $(ratio "$(med tmx lat 8)" "$(med ucx lat 8)") | $(ratio "$(med tmx lat 8)" "$SPIN_US") (spinning ping-pong; $(ratio "$(med tmx lat 8)" "$CONN_US") with both ends connected) |"
    echo "| ping-pong bandwidth 64 KiB | $(ratio "$(med tmx pbw 65536)" "$(med rxd pbw 65536)") | $(ratio "$(med tmx pbw 65536)" "$(med rxm pbw 65536)") | $(ratio "$(med tmx pbw 65536)" "$(med ucx pbw 65536)") | |"
    echo "| ping-pong bandwidth 1 MiB | $(ratio "$(med tmx pbw 1048576)" "$(med rxd pbw 1048576)") | $(ratio "$(med tmx pbw 1048576)" "$(med rxm pbw 1048576)") | $(ratio "$(med tmx pbw 1048576)" "$(med ucx pbw 1048576)") | |"
    echo "| streaming bandwidth 64 KiB | n/a | n/a | $(ratio "$(med tmx bw 65536)" "$(med ucx bw 65536)") | $(ratio "$(med tmx bw 65536)" "$(med udpstream bw 1472)") (1472 B stream), $(ratio "$(med tmx bw 65536)" "$GRO_MBS") (GSO+GRO) |"
    echo "| streaming bandwidth 1 MiB | n/a | n/a | $(ratio "$(med tmx bw 1048576)" "$(med ucx bw 1048576)") | $(ratio "$(med tmx bw 1048576)" "$(med udpstream bw 1472)") (1472 B stream), $(ratio "$(med tmx bw 1048576)" "$GRO_MBS") (GSO+GRO) |"
    for p in 1 5; do
        echo "| latency 8 B at $p % loss | $(ratio "$(lossmed tmx loss_lat8 $p)" "$(lossmed rxd loss_lat8 $p)") | | | |"
        echo "| latency 8 B at $p % loss, 99th percentile | $(ratio "$(lossmed tmx loss_lat8p99 $p)" "$(lossmed rxd loss_fl8p99 $p)") | | | |"
        echo "| ping-pong bandwidth 1 MiB at $p % loss | $(ratio "$(lossmed tmx loss_pbw1m $p)" "$(lossmed rxd loss_pbw1m $p)") | | | |"
    done
    echo
    echo "## Latency, 8 B, one way (us)"
    echo
    echo "| system | median | min | max | per round | tmx / this |"
    echo "|---|---|---|---|---|---|"
    row "tmx udp (mean of $N_LAT8 round trips / 2)" tmx lat 8 us lat 8
    row "libfabric udp;ofi_rxd (fi_pingpong, mean)" rxd lat 8 us lat 8
    row "libfabric tcp;ofi_rxm (fi_pingpong, mean)" rxm lat 8 us lat 8
    row "UCX tcp tag_lat (overall mean)" ucx lat 8 us lat 8
    row "UCX tcp tag_lat (median of its last samples)" ucx lattyp 8 us - -
    row "limit: raw UDP ping-pong, spinning (mean of $N_PP)" udpspin lat 8 us lat 8
    row "raw UDP ping-pong, spinning (median)" udpspin latmed 8 us - -
    row "raw UDP ping-pong, spinning (99th percentile)" udpspin latp99 8 us - -
    row "raw UDP ping-pong, spinning, server connected too (mean of $N_PP)" udpconn lat 8 us lat 8
    row "raw UDP ping-pong, spinning, server connected too (median)" udpconn latmed 8 us - -
    row "raw UDP ping-pong, blocking recvfrom (mean of $((N_PP / 2)))" udpblocking lat 8 us lat 8
    row "raw UDP ping-pong, blocking (median)" udpblocking latmed 8 us - -
    row "raw UDP ping-pong, blocking (99th percentile)" udpblocking latp99 8 us - -
    echo
    echo "Distance to the limit: tmx's 8 B one-way latency is $(ratio "$(med tmx lat 8)" "$SPIN_US") times a raw UDP"
    echo "ping-pong between the same two hosts with both sides spinning on a non-blocking recv"
    lat_d=$(awk -v a="$(med tmx lat 8)" -v b="$SPIN_US" 'BEGIN { if (a != "" && b != "") printf "%.2f", a - b; else printf "n/a" }')
    case "$lat_d" in
    -*)
        echo "($(fmt us "$(med tmx lat 8)") us vs $(fmt us "$SPIN_US") us: tmx is ${lat_d#-} us faster. The raw client sends on a"
        echo "connected socket, but its server answers with sendto on an unconnected one, which looks the"
        echo "route up for every datagram, as an echo server does; tmx sends to each peer through a socket"
        echo "connected to it on both sides (docs/udp.md), which saves more than tmx's header, CRC-32C,"
        echo "matching, reliability and progress engine cost)."
        ;;
    *)
        echo "($(fmt us "$(med tmx lat 8)") us vs $(fmt us "$SPIN_US") us: $lat_d us more per message, the cost of"
        echo "tmx's header, CRC-32C, matching, reliability and progress engine)."
        ;;
    esac
    echo
    echo "Against the quickest raw path, both ends on connected sockets as tmx's are (udp_pingpong"
    echo "server -C): $(ratio "$(med tmx lat 8)" "$CONN_US") ($(fmt us "$(med tmx lat 8)") us vs $(fmt us "$CONN_US") us), which leaves only tmx's own work."
    echo
    for s in 65536 1048576; do
        sz=$([ $s = 65536 ] && echo "64 KiB" || echo "1 MiB")
        echo "## Bandwidth, $sz (MB/s = 10^6 bytes/s)"
        echo
        echo "| system | median | min | max | per round | tmx / this |"
        echo "|---|---|---|---|---|---|"
        row "tmx streaming (-t bw, window $WINDOW)" tmx bw $s mbs bw $s
        row "UCX tcp streaming (tag_bw -O $WINDOW)" ucx bw $s mbs bw $s
        row "tmx ping-pong (size / one-way latency)" tmx pbw $s mbs pbw $s
        row "libfabric udp;ofi_rxd ping-pong" rxd pbw $s mbs pbw $s
        row "libfabric tcp;ofi_rxm ping-pong" rxm pbw $s mbs pbw $s
        row "UCX tcp ping-pong (tag_lat)" ucx pbw $s mbs pbw $s
        row "limit: raw UDP stream, 1472 B datagrams" udpstream bw 1472 mbs bw $s
        row "limit: raw UDP stream, 1472 B datagrams sent by GSO ($GSO_SEND B per send)" udpgso bw 1472 mbs bw $s
        row "limit: the same with UDP_GRO at the receiver" udpgsogro bw 1472 mbs bw $s
        echo
        echo "Distance to the limits at $sz: tmx streams at $(pct_fmt "$(med tmx bw $s)" "$(med udpstream bw 1472)") of a raw stream of 1472-byte"
        echo "datagrams (the datagram size tmx uses at MTU $MTU), $(pct_fmt "$(med tmx bw $s)" "$GSO_MBS") of the same sent with GSO and"
        echo "$(pct_fmt "$(med tmx bw $s)" "$GRO_MBS") of GSO with GRO at the receiver."
        echo
    done
    echo "## Raw UDP limits (bench/limits/)"
    echo
    echo "A sender in host 2 (core 1) blasts datagrams at a receiver in host 1 (core 0) for $STREAM_S s; the"
    echo "receiver counts the payload bytes it gets (goodput; no reliability: what overflows is lost)."
    echo "Datagrams above $((MTU - 28)) bytes go out as IP fragments (MTU $MTU); one lost fragment loses the datagram."
    echo
    echo "| stream | median (MB/s) | min | max | per round |"
    echo "|---|---|---|---|---|"
    for s in $STREAMS; do
        echo "| $s B datagrams$([ "$s" -gt $((MTU - 28)) ] && echo " ($(((s + 8 + MTU - 21) / (MTU - 20))) IP fragments each)") | **$(fmt mbs "$(med udpstream bw "$s")")** | $(fmt mbs "$(st udpstream bw "$s" min)") | $(fmt mbs "$(st udpstream bw "$s" max)") | $(fmtlist mbs "$(st udpstream bw "$s" list)") |"
    done
    echo "| 1472 B datagrams, sent by GSO ($GSO_SEND B per send, UDP_SEGMENT 1472) | **$(fmt mbs "$GSO_MBS")** | $(fmt mbs "$(st udpgso bw 1472 min)") | $(fmt mbs "$(st udpgso bw 1472 max)") | $(fmtlist mbs "$(st udpgso bw 1472 list)") |"
    echo "| the same, UDP_GRO at the receiver | **$(fmt mbs "$GRO_MBS")** | $(fmt mbs "$(st udpgsogro bw 1472 min)") | $(fmt mbs "$(st udpgsogro bw 1472 max)") | $(fmtlist mbs "$(st udpgsogro bw 1472 list)") |"
    echo
    echo "Over veth, a GSO send travels to the receiving namespace as one large packet and is cut into"
    echo "datagrams only at the receiving socket, or not at all with UDP_GRO: that is why those two rows"
    echo "beat the plain 1472-byte stream by far, and why they are the relevant ceiling for a transport"
    echo "that uses GSO/GRO (tmx's udp transport asks for both: src/tl/udp/udp.c)."
    echo
    echo "## Under loss: tmx vs rxd, UDP datagrams dropped by the kernel"
    echo
    echo "In each round, for 0, 1 and 5 %, both hosts get an nft rule that drops that share of the UDP"
    echo "datagrams they send (\`meta l4proto udp numgen random mod 100 < P drop\` in an output hook, as"
    echo "tests/fault/hosts.sh's fault_nft_drop; TCP, which tmxrun's service and fi_pingpong's control"
    echo "connection use, is spared). tcp;rxm and UCX-tcp are left out: TCP recovers in the kernel, and"
    echo "only UDP is dropped. Fewer iterations than above: tmx-perf -t lat -s 8 -n $LOSS_LAT8, -t lat -s 1m -n $LOSS_LAT1M,"
    echo "-t bw -s 1m -n $LOSS_BW -w $LOSS_W (one warm-up window of $LOSS_W, then $((LOSS_BW / LOSS_W)) measured: a smaller window than"
    echo "the $WINDOW above, so that a slow run still ends), fi_pingpong -I $LOSS_LAT8_FI -S 8 and -I $LOSS_LAT1M -S 1048576,"
    echo "fi_lat -n $LOSS_LAT8_FI -s 8; each tmx run bounded by $LOSS_TO s, each libfabric one by $LOSS_TO_FI s. The 0 % rows"
    echo "are the same commands without the rule."
    echo
    echo "**Percentiles.** tmx-perf reports the mean, median and 99th percentile of the half round"
    echo "trips; fi_pingpong reports only the mean, so rxd's distribution comes from bench/limits/fi_lat.c,"
    echo "the same tagged ping-pong over libfabric (fi_tsend/fi_trecv on an RDM endpoint, the CQ"
    echo "polled) timing every round trip, run with -n $LOSS_LAT8_FI after fi_pingpong at each level. Under"
    echo "loss the mean and the 99th percentile are dominated by the round trips that wait for a"
    echo "retransmission, so they measure how fast each library repairs a lost datagram (a ping-pong"
    echo "has nothing in flight behind a lost datagram, so no ACK can reveal the loss: only a timer"
    echo "can; tmx's is the tail loss probe, 1.5 round trips after the last ACK, at least 100 us, see"
    echo "docs/udp.md). A run that hangs (seen with rxd: no result until the bound) is counted in the"
    echo "table below and listed under \"Problems\"; a run that printed its result and then failed to"
    echo "exit keeps its figure."
    echo
    echo "| system, measurement | UDP dropped | median | min | max | per round |"
    echo "|---|---|---|---|---|---|"
    for p in $LOSS_PCTS; do
        lossrow "tmx, latency 8 B (us, mean)" tmx loss_lat8 "$p" us
        lossrow "rxd, latency 8 B (us, mean, fi_pingpong)" rxd loss_lat8 "$p" us
        lossrow "rxd, latency 8 B (us, mean, fi_lat)" rxd loss_fl8 "$p" us
    done
    for p in $LOSS_PCTS; do
        lossrow "tmx, latency 8 B (us, median)" tmx loss_lat8med "$p" us
        lossrow "rxd, latency 8 B (us, median, fi_lat)" rxd loss_fl8med "$p" us
    done
    for p in $LOSS_PCTS; do
        lossrow "tmx, latency 8 B (us, 99th percentile)" tmx loss_lat8p99 "$p" us
        lossrow "rxd, latency 8 B (us, 99th percentile, fi_lat)" rxd loss_fl8p99 "$p" us
    done
    for p in $LOSS_PCTS; do
        lossrow "tmx, ping-pong bandwidth 1 MiB (MB/s)" tmx loss_pbw1m "$p" mbs
        lossrow "rxd, ping-pong bandwidth 1 MiB (MB/s)" rxd loss_pbw1m "$p" mbs
    done
    for p in $LOSS_PCTS; do
        lossrow "tmx, streaming goodput 1 MiB, -w $LOSS_W (MB/s)" tmx loss_bw1m "$p" mbs
    done
    echo
    echo "tmx / rxd (of the medians): latency 8 B $(ratio "$(lossmed tmx loss_lat8 0)" "$(lossmed rxd loss_lat8 0)") at 0 %, $(ratio "$(lossmed tmx loss_lat8 1)" "$(lossmed rxd loss_lat8 1)") at 1 %,"
    echo "$(ratio "$(lossmed tmx loss_lat8 5)" "$(lossmed rxd loss_lat8 5)") at 5 %; ping-pong bandwidth 1 MiB $(ratio "$(lossmed tmx loss_pbw1m 0)" "$(lossmed rxd loss_pbw1m 0)") at 0 %, $(ratio "$(lossmed tmx loss_pbw1m 1)" "$(lossmed rxd loss_pbw1m 1)") at 1 %,"
    echo "$(ratio "$(lossmed tmx loss_pbw1m 5)" "$(lossmed rxd loss_pbw1m 5)") at 5 %. tmx's streaming goodput at 1 MiB keeps $(pct_fmt "$(lossmed tmx loss_bw1m 1)" "$(lossmed tmx loss_bw1m 0)") of its loss-free"
    echo "figure at 1 % and $(pct_fmt "$(lossmed tmx loss_bw1m 5)" "$(lossmed tmx loss_bw1m 0)") at 5 % (fi_pingpong has no streaming test, so rxd has no such row)."
    echo
    echo "Share of UDP datagrams the rules actually dropped (nft counters, both hosts, over the whole"
    echo "level of a round): $(for p in $LOSS_PCTS; do [ "$p" = 0 ] || printf '%s %%: %s; ' "$p" "$(fmtlist pct "$(st nft dropped "p$p" list)")"; done | sed 's/; $//')."
    echo
    echo "## Calibration: memcpy on core 0 at the start of each round (GB/s, best of 3)"
    echo
    echo "Same program, same sizes, every round: the spread of these figures is how much the machine"
    echo "itself moved during the run. Just before it, the script idles for 1 s and reads how busy"
    echo "other processes kept cores 0 and 1 (this machine is shared). raw/udp/r<round>_calibration.txt"
    echo "also has the load average and the busiest processes at that moment."
    echo
    calibration_tables "calibration ${SYSTEMS[*]}"
    echo
    echo "## Size sweeps (median over rounds; plotted in udp.png)"
    echo
    echo "![latency and bandwidth vs size](udp.png)"
    echo
    echo "| size (B) | tmx lat (us) | rxd lat | tcp;rxm lat | UCX lat | tmx stream (MB/s) | UCX stream | tmx ping-pong (MB/s) | rxd ping-pong | tcp;rxm ping-pong | UCX ping-pong |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    for s in $SWEEP; do
        echo "| $s | $(fmt us "$(med tmx swlat "$s")") | $(fmt us "$(med rxd swlat "$s")") | $(fmt us "$(med rxm swlat "$s")") | $(fmt us "$(med ucx swlat "$s")") | $(fmt mbs "$(med tmx swbw "$s")") | $(fmt mbs "$(med ucx swbw "$s")") | $(fmt mbs "$(med tmx swpbw "$s")") | $(fmt mbs "$(med rxd swpbw "$s")") | $(fmt mbs "$(med rxm swpbw "$s")") | $(fmt mbs "$(med ucx swpbw "$s")") |"
    done
    echo
    echo "Sweep iteration counts, the same for every system: round trips min(10000, 2^25 / (size + 1024)),"
    echo "streamed messages min(20000, 2^27 / (size + 1024)) rounded up to whole windows of $WINDOW$([ "$QUICK" = 1 ] && echo ", divided by $DIV in this quick run"); at"
    echo "least 20 (tmx-perf's own default moves up to 1 GiB per size, minutes over UDP). fi_pingpong's"
    echo "own sweep (-S all) runs 10000 round trips per size below 64 KiB and was not used; it is run"
    echo "once per size with -S and -I instead, like tmx-perf."
    echo
    echo "## How each figure is measured"
    echo
    echo "- **Hosts and pinning.** Host 1 (NS1) runs tmx's rank 0, the fi_pingpong and ucx_perftest"
    echo "  servers and the raw receivers, on core 0; host 2 (NS2) runs rank 1, the clients and the"
    echo "  raw senders, on core 1 (tmx through \`bench/pin_rank.sh\` under tmxrun, the others with"
    echo "  \`taskset\`, the limit probes with sched_setaffinity). The kernel's packet processing runs"
    echo "  on those same cores (veth delivers in the sender's softirq)."
    echo "- **tmx** is started by \`tmxrun --hosts NS1,NS2 --agent 'ip netns exec {host}' --kvs-addr $KVS\`:"
    echo "  rank r on host r+1, the key-value service on the bridge address; tmx's udp transport binds"
    echo "  eth0 of its host. \`-x udp\` makes tmx-perf open only the self and udp transports."
    echo "- **Latency** is one way: a ping-pong's round-trip time / 2, the mean over all timed round"
    echo "  trips for tmx-perf, fi_pingpong (usec/xfer) and UCX (\"overall\"; its \"typical\" column, a"
    echo "  median of recent samples, is shown separately). The raw UDP ping-pong reports mean, median"
    echo "  and 99th percentile of its per-round-trip times."
    echo "- **Units.** ucx_perftest prints MiB/s (2^20), converted here to MB/s (10^6). fi_pingpong's"
    echo "  MB/sec is bytes per microsecond = 10^6 B/s."
    echo "- **Warm-up.** tmx-perf warms up with n/10 + 1 iterations (one window more for bw), ucx_perftest"
    echo "  with -w n/10, the raw ping-pong with n/10 + 1. fi_pingpong has no warm-up, and its timed loop"
    echo "  includes the first message's connection setup (rxm connects on first send, rxd makes its"
    echo "  handshake): about 10 to 30 ms measured here with -I 1, which adds setup / (2 n) to its mean, e.g."
    echo "  at most ~1.5 us at 8 B with n = 10000 and ~0.3 us with n = $N_LAT8; more at the large sizes,"
    echo "  which run few round trips (~3 % at 1 MiB with n = $N_LAT1M)."
    echo "- **libfabric settings** are the defaults apart from the interface (FI_UDP_IFACE, FI_TCP_IFACE)."
    echo "  rxd's progress spins FI_OFI_RXD_SPIN_COUNT (default 1000) times before it falls back to"
    echo "  waiting; that default is kept."
    echo
    echo "## Exact commands (round 1)"
    echo
    echo "Run from the repository root, as root. NS1 and NS2 stand for the two namespaces ($NS1 and"
    echo "$NS2 in this run: the prefix carries the script's pid), $IP1/$IP2 are their addresses,"
    echo "$KVS the bridge's. \`udp_pingpong\` and \`udp_stream\` are bench/limits/*.c built with gcc -O2."
    echo "Every command is in \`raw/udp/commands.txt\` with its round."
    echo
    echo '```'
    clean_cmd() { sed -e "s#$TMP/limits/##g" -e "s#$TMP/bin/#build/release/tools/#g" -e "s#$TMP/#\$TMP/#g" -e "s#$ROOT/##g" -e 's/\\,/,/g' -e 's/\\{/{/g' -e 's/\\}/}/g' -e 's/\\;/;/g' \
        -e "s#$NS1#NS1#g" -e "s#$NS2#NS2#g" -e "s#ip\\\\ netns\\\\ exec\\\\ {host}#'ip netns exec {host}'#g" -e 's/ *$//'; }
    awk '$1 == "r1" { sub(/^r1  /, ""); print }' "$RAWNEW/commands.txt" | clean_cmd
    echo
    echo "# size sweeps: the first command of each kind; repeated for every size ($(echo $SWEEP | awk '{ print $1 }') to $(echo $SWEEP | awk '{ print $NF }') B)"
    echo "# with the sweep iteration counts (see above); UCX's sweep is one batch file"
    awk '$1 == "r1s" { sub(/^r1s  /, ""); k = $0; gsub(/[0-9]+/, "N", k); if (!seen[k]++) print }' "$RAWNEW/commands.txt" | clean_cmd
    echo
    echo "# the UCX batch file ucx_main.batch (ucx_sweep.batch is in raw/udp/ too):"
    sed 's/^/#   /' "$RAWNEW/ucx_main.batch" 2>/dev/null || true
    echo '```'
    echo
    problems_section
    echo
    echo "Raw outputs: \`raw/udp/\` (r<round>_<system>*.txt, hosts.txt, data.tsv with every figure, stats.tsv"
    echo "with the medians, timeouts.tsv, plot.gp)."
} >"$MD"

# ----------------------------------------------------------------- publish
bench_publish
