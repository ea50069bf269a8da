#!/usr/bin/env bash
# bench/shm.sh - side-by-side shared-memory benchmark (issue "shm").
#
# On this one machine, in interleaved rounds, measures two processes talking
# over shared memory, pinned to cores 0 and 1:
#   tmx        tmx-perf -x shm (lat, bw, rate; size sweeps)
#   UCX        ucx_perftest tag_lat / tag_bw, UCX_TLS=posix,cma,self
#   libfabric  fi_pingpong -p shm -e rdm -m tagged
#   Open MPI   NetPIPE (NPopenmpi) over --mca pml ob1 --mca btl self,vader
#   limits     one-cache-line ping-pong, memcpy, process_vm_readv (bench/limits/)
# plus tmx and UCX latency with both processes on ONE core, and a memcpy
# calibration figure at the start of every round so machine drift shows.
#
# Writes results/shm.md, results/shm.png and results/raw/shm/ (see
# bench/README.md). Usage: bench/shm.sh [-r ROUNDS] [--quick] [-h]
# The helpers it shares with udp.sh (options, process hygiene, waiting for
# quiet cores, statistics, report tables) are in bench/lib.sh.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: bench/shm.sh [-r ROUNDS] [--quick] [--no-wait] [--no-install] [--no-build] [-o DIR]
  -r ROUNDS     interleaved rounds (default 3); every round runs every system once
  --quick       1 round, 1/10 of the iterations, sweep at powers of 4; writes to
                results/quick/ unless -o is given (a smoke test, not a result)
  --no-wait     do not wait for other processes to leave cores 0 and 1 before each
                step (by default it waits up to 20 s per step, 180 s per run in all)
  --no-install  do not apt-get install missing tools (fail if any is missing)
  --no-build    use the existing build/release binaries as they are
  -o DIR        output folder (default bench/results)
EOF
}

BENCH=shm
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
bench_args "$@"
bench_init
bench_need "ucx_perftest fi_pingpong NPopenmpi mpirun gnuplot taskset gcc cmake" \
    ucx-utils libfabric-bin netpipe-openmpi openmpi-bin gnuplot-nox util-linux gcc cmake make
bench_build pingpong memcpy_bw cma_bw

# ------------------------------------------------------------------- sizes
if [ "$QUICK" = 1 ]; then
    DIV=10
    SWEEP="1 4 16 64 256 1024 4096 16384 65536 262144 1048576 4194304 16777216"
else
    DIV=1
    SWEEP=$(awk 'BEGIN { for (s = 1; s <= 16777216; s *= 2) printf "%d ", s }')
fi
it() { local n=$(($1 / DIV)); [ $n -ge 20 ] && echo $n || echo 20; }
# tmx-perf's own rule for its default iteration counts, used for every
# system's sweep so all see the same counts per size.
sweep_iters() { # lat|bw SIZE
    awk -v t="$1" -v s="$2" -v d="$DIV" 'BEGIN {
        n = int(1073741824 / (s + 1024)); if (t == "lat") n = int(n / 8);
        if (n > 20000) n = 20000; n = int(n / d); if (n < 20) n = 20; print n }'
}
N_LAT8=$(it 200000)      # 8 B ping-pong round trips
N_LAT1M=$(it 1000)       # 1 MiB ping-pong round trips
N_LAT16M=$(it 100)       # 16 MiB ping-pong round trips
N_BW1M=$(it 4000)        # 1 MiB streamed messages
N_BW16M=$(it 250)        # 16 MiB streamed messages
N_RATE=$(it 2000000)     # 8 B streamed messages
N_ONE_TMX=$(it 20000)    # one-core 8 B round trips, tmx
N_ONE_UCX=$([ "$QUICK" = 1 ] && echo 200 || echo 1000) # one-core 8 B round trips, UCX (~4 ms each when busy-polling)
WINDOW=64                # tmx-perf's default -w, and UCX's -O
PP_ITERS=$(it 1000000)
LIMIT_TRIALS=5 LIMIT_MS=$((150 / DIV + 20))
SWEEP_CSV=$(echo $SWEEP | tr ' ' ',')
export UCX_TLS=posix,cma,self            # UCX shared memory (+self); no network transport
export UCX_WARN_UNUSED_ENV_VARS=n

bench_staging

# ------------------------------------------------------------------ systems
tmx_pinned() { # FILE tmx-perf args...: rank r runs on core r
    local file=$1; shift
    run "$file" "$TMXRUN" -n 2 --timeout "$TO" "$HERE/pin_rank.sh" "$PERF" "$@" -x shm --csv
}
tmx_parse() { # FILE METRIC|auto [PBWMETRIC]: csv rows -> records (auto: the test's name)
    awk -F, -v m="$2" -v p="${3:-}" '$1 ~ /^(lat|bw|bibw|rate)$/ && NF == 6 {
        printf "%s\t%s\t%s\n", (m == "auto" ? $1 : m), $3, $5
        if (p != "") printf "%s\t%s\t%.3f\n", p, $3, $3 / $5 }' "$1" |
        while IFS=$'\t' read -r m s v; do rec tmx "$m" "$s" "$v"; done
}
sys_tmx() {
    local f=$RAWNEW/r${ROUND}_tmx.txt
    tmx_pinned "$f" -t lat -s 8 -n "$N_LAT8"
    [ $RC = 0 ] || fail tmx "lat 8" $RC "$f"
    tmx_pinned "$f" -t lat -s 1m -n "$N_LAT1M"
    [ $RC = 0 ] || fail tmx "lat 1m" $RC "$f"
    tmx_pinned "$f" -t lat -s 16m -n "$N_LAT16M"
    [ $RC = 0 ] || fail tmx "lat 16m" $RC "$f"
    tmx_parse "$f" lat pbw
    : >"$TMP/t2"
    tmx_pinned "$TMP/t2" -t bw -s 1m -n "$N_BW1M"
    [ $RC = 0 ] || fail tmx "bw 1m" $RC "$f"
    tmx_pinned "$TMP/t2" -t bw -s 16m -n "$N_BW16M"
    [ $RC = 0 ] || fail tmx "bw 16m" $RC "$f"
    tmx_pinned "$TMP/t2" -t rate -s 8 -n "$N_RATE"
    [ $RC = 0 ] || fail tmx "rate 8" $RC "$f"
    tmx_parse "$TMP/t2" auto
    cat "$TMP/t2" >>"$f"
    : >"$TMP/t2"
    # sweeps: one run per size with the iteration rule every system's sweep uses
    SWEEPING=1
    : >"$TMP/t2"
    for sz in $SWEEP; do
        tmx_pinned "$TMP/t2" -t lat -s "$sz" -n "$(sweep_iters lat "$sz")"
        [ $RC = 0 ] || fail tmx "lat sweep $sz" $RC "$f"
    done
    tmx_parse "$TMP/t2" swlat swpbw
    cat "$TMP/t2" >>"$f"
    : >"$TMP/t2"
    for sz in $SWEEP; do
        tmx_pinned "$TMP/t2" -t bw -s "$sz" -n "$(sweep_iters bw "$sz")"
        [ $RC = 0 ] || fail tmx "bw sweep $sz" $RC "$f"
    done
    tmx_parse "$TMP/t2" swbw
    cat "$TMP/t2" >>"$f"
    SWEEPING=0
}

ucx_pair() { # NAME BATCHFILE SERVER_CORE CLIENT_CORE TIMEOUT: runs a batch, parses the client's CSV
    local name=$1 batch=$2 cs=$3 cc=$4 to=$5 f=$RAWNEW/r${ROUND}_ucx_$1.txt fs=$RAWNEW/r${ROUND}_ucx_$1_server.txt
    local spid crc
    next_port
    cp "$batch" "$RAWNEW/ucx_$name.batch"
    logcmd "UCX_TLS=$UCX_TLS taskset -c $cs timeout $to ucx_perftest -b ucx_$name.batch -p $PORT  &  UCX_TLS=$UCX_TLS taskset -c $cc timeout $to ucx_perftest 127.0.0.1 -b ucx_$name.batch -p $PORT -v -f"
    start_bg "$fs" taskset -c "$cs" timeout "$to" ucx_perftest -b "$batch" -p "$PORT"
    spid=$BG
    if ! wait_listen "$PORT" "$spid"; then
        wait_bg "$spid"
        fail ucx "$name server" "$RC" "$fs"
        return
    fi
    start_bg "$f" taskset -c "$cc" timeout "$to" ucx_perftest 127.0.0.1 -b "$batch" -p "$PORT" -v -f
    wait_bg "$BG"
    crc=$RC
    if [ $crc != 0 ]; then
        kill -TERM "$spid" 2>/dev/null || true
    fi
    wait_bg "$spid"
    [ $crc = 0 ] || fail ucx "$name" "$crc" "$f"
    [ $crc != 124 ] || echo "$name" >>"$TMP/ucx_timeouts"
    # label,iterations,typical_lat,avg_lat,overall_lat,avg_bw,overall_bw(MiB/s),avg_mr,overall_mr
    awk -F, '$1 ~ /^[a-z0-9]+_[0-9]+$/ && NF == 9 {
        split($1, a, "_"); t = a[1]; s = a[2]
        if (t == "lat" || t == "swlat") {
            print t "\t" s "\t" $5
            if (t == "lat") print "lattyp\t" s "\t" $3
            print (t == "lat" ? "pbw" : "swpbw") "\t" s "\t" sprintf("%.3f", s / $5)
        } else if (t == "bw" || t == "swbw") {
            print t "\t" s "\t" sprintf("%.3f", $7 * 1.048576)
        } else if (t == "rate") {
            print "rate\t" s "\t" $9
        } else if (t == "one") {
            print "lat1\t" s "\t" $5
            print "lat1typ\t" s "\t" $3
        } }' "$f" | while IFS=$'\t' read -r m s v; do rec ucx "$m" "$s" "$v"; done
}
sys_ucx() {
    local b=$TMP/ucx.batch s n
    {
        printf 'lat_8 -t tag_lat -s 8 -n %s -w %s\n' "$N_LAT8" $((N_LAT8 / 10))
        printf 'lat_1048576 -t tag_lat -s 1048576 -n %s -w %s\n' "$N_LAT1M" $((N_LAT1M / 10 + 1))
        printf 'lat_16777216 -t tag_lat -s 16777216 -n %s -w %s\n' "$N_LAT16M" $((N_LAT16M / 10 + 1))
        printf 'bw_1048576 -t tag_bw -s 1048576 -n %s -w %s -O %s\n' "$N_BW1M" $((N_BW1M / 10 + 1)) $WINDOW
        printf 'bw_16777216 -t tag_bw -s 16777216 -n %s -w %s -O %s\n' "$N_BW16M" $((N_BW16M / 10 + 1)) $WINDOW
        printf 'rate_8 -t tag_bw -s 8 -n %s -w %s -O %s\n' "$N_RATE" $((N_RATE / 10)) $WINDOW
    } >"$b"
    ucx_pair main "$b" 0 1 "$TO"
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
    ucx_pair sweep "$b" 0 1 "$TO"
    SWEEPING=0
}

fi_one() { # FILE SIZE ITERS METRIC PBWMETRIC: one fi_pingpong server/client pair
    local f=$1 s=$2 n=$3 spid crc
    next_port
    logcmd "taskset -c 0 fi_pingpong -p shm -e rdm -m tagged -I $n -S $s -B $PORT  &  taskset -c 1 fi_pingpong -p shm -e rdm -m tagged -I $n -S $s -P $PORT 127.0.0.1"
    start_bg "$TMP/fi_server.txt" taskset -c 0 timeout "$TO" fi_pingpong -p shm -e rdm -m tagged -I "$n" -S "$s" -B "$PORT"
    spid=$BG
    if ! wait_listen "$PORT" "$spid"; then
        wait_bg "$spid"
        fail libfabric "server size $s" "$RC" "$f"
        return
    fi
    : >"$TMP/fi_client.txt"
    start_bg "$TMP/fi_client.txt" taskset -c 1 timeout "$TO" fi_pingpong -p shm -e rdm -m tagged -I "$n" -S "$s" -P "$PORT" 127.0.0.1
    wait_bg "$BG"
    crc=$RC
    [ $crc = 0 ] || kill -TERM "$spid" 2>/dev/null || true
    wait_bg "$spid"
    cat "$TMP/fi_client.txt" >>"$f"
    [ $crc = 0 ] || { fail libfabric "size $s" "$crc" "$f"; return; }
    # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec; usec/xfer = one way
    awk -v s="$s" -v m="$4" -v p="$5" '$1 ~ /^[0-9]+[kmg]?$/ && NF == 8 && $7 + 0 > 0 {
        printf "%s\t%s\t%s\n%s\t%s\t%.3f\n", m, s, $7, p, s, s / $7 }' "$TMP/fi_client.txt" |
        while IFS=$'\t' read -r m s v; do rec libfabric "$m" "$s" "$v"; done
}
sys_libfabric() {
    local f=$RAWNEW/r${ROUND}_libfabric.txt s
    : >"$TMP/fi_server.txt"
    fi_one "$f" 8 "$N_LAT8" lat pbw
    fi_one "$f" 1048576 "$N_LAT1M" lat pbw
    fi_one "$f" 16777216 "$N_LAT16M" lat pbw
    SWEEPING=1
    for s in $SWEEP; do fi_one "$f" "$s" "$(sweep_iters lat "$s")" swlat swpbw; done
    SWEEPING=0
    cat "$TMP/fi_server.txt" >"$RAWNEW/r${ROUND}_libfabric_server.txt"
}

MPIRUN=(mpirun --allow-run-as-root -n 2 --mca pml ob1 --mca btl self,vader --bind-to core --report-bindings)
np_one() { # FILE NPARGS...: NetPIPE into $TMP/np.out, appended to FILE
    local f=$1; shift
    rm -f "$TMP/np.out"
    run "$f" timeout "$TO" "${MPIRUN[@]}" NPopenmpi -p 0 "$@" -o "$TMP/np.out"
    if [ $RC != 0 ] || [ ! -s "$TMP/np.out" ]; then
        fail openmpi "NPopenmpi $*" "$RC" "$f"
        rm -f "$TMP/np.out"
        return
    fi
    { echo "### np.out"; cat "$TMP/np.out"; } >>"$f"
}
# np.out: bytes, Mbps (2^20 bit/s), seconds (one way: round trip / 2, or
# per message with -s); best (lowest time) of NetPIPE's trials.
np_rec() { # METRIC KIND(lat|bw) [PBWMETRIC] [pow2only]
    [ -s "$TMP/np.out" ] || return 0
    awk -v m="$1" -v k="$2" -v p="${3:-}" -v pow2="${4:-}" 'NF >= 3 && $3 > 0 {
        s = $1; x = s; while (x > 1 && x % 2 == 0) x /= 2
        if (pow2 != "" && x != 1) next
        if (k == "lat") printf "%s\t%s\t%.4f\n", m, s, $3 * 1e6
        else printf "%s\t%s\t%.3f\n", m, s, s / $3 / 1e6
        if (p != "") printf "%s\t%s\t%.3f\n", p, s, s / $3 / 1e6 }' "$TMP/np.out" |
        while IFS=$'\t' read -r m s v; do rec openmpi "$m" "$s" "$v"; done
}
sys_openmpi() {
    local f=$RAWNEW/r${ROUND}_openmpi.txt
    np_one "$f" -l 8 -u 8 -n "$N_LAT8" && np_rec lat lat pbw
    np_one "$f" -l 1048576 -u 1048576 -n "$N_LAT1M" && np_rec lat lat pbw
    np_one "$f" -l 16777216 -u 16777216 -n "$N_LAT16M" && np_rec lat lat pbw
    np_one "$f" -s -l 1048576 -u 1048576 -n "$N_BW1M" && np_rec bw bw
    np_one "$f" -s -l 16777216 -u 16777216 -n "$N_BW16M" && np_rec bw bw
    SWEEPING=1
    np_one "$f" -l 1 -u 16777216 && np_rec swlat lat swpbw pow2
    SWEEPING=0
}

sys_limits() {
    local f=$RAWNEW/r${ROUND}_limits.txt
    run "$f" timeout "$TO" "$LIM/pingpong" "$PP_ITERS" "$LIMIT_TRIALS" 0 1
    [ $RC = 0 ] || fail limits pingpong $RC "$f"
    run "$f" timeout "$TO" "$LIM/memcpy_bw" -c 0 -t "$LIMIT_TRIALS" -m "$LIMIT_MS" 1048576 16777216
    [ $RC = 0 ] || fail limits memcpy $RC "$f"
    run "$f" timeout "$TO" "$LIM/cma_bw" -a 0 -b 1 -t "$LIMIT_TRIALS" -m "$LIMIT_MS" 1048576 16777216
    [ $RC = 0 ] || fail limits process_vm_readv $RC "$f"
    awk '/^pingpong_oneway_ns/ { split($2, a, "="); print "cacheline\tlat\t64\t" a[2] / 1000 }
         /^memcpy size=/ || /^process_vm_readv size=/ {
            split($2, s, "="); split($3, b, "=")
            print ($1 == "memcpy" ? "memcpy" : "process_vm_readv") "\tbw\t" s[2] "\t" b[2] * 1000 }' "$f" |
        while IFS=$'\t' read -r y m s v; do rec "$y" "$m" "$s" "$v"; done
}

one_core() {
    local f=$RAWNEW/r${ROUND}_onecore_tmx.txt b=$TMP/one.batch
    run "$f" taskset -c 0 "$TMXRUN" -n 2 --timeout 60 "$PERF" -t lat -s 8 -n "$N_ONE_TMX" -x shm --csv
    if [ $RC = 0 ]; then
        awk -F, '$1 == "lat" && NF == 6 { print $5 }' "$f" | while read -r v; do rec tmx lat1 8 "$v"; done
    else
        fail tmx "one-core lat" $RC "$f"
        [ $RC != 124 ] || echo "r$ROUND" >>"$TMP/tmx_one_timeouts"
    fi
    printf 'one_8 -t tag_lat -s 8 -n %s -w 10\n' "$N_ONE_UCX" >"$b"
    ucx_pair onecore "$b" 0 0 60
}

# ------------------------------------------------------------------- rounds
START=$(date '+%F %T %Z')
T0=$(date +%s)
SYSTEMS=(limits tmx ucx libfabric openmpi)
log "output: $OUT (rounds: $ROUNDS$([ "$QUICK" = 1 ] && echo ', quick'))"
bench_round_end() {
    quiet onecore
    log "round $ROUND/$ROUNDS: one core (tmx, UCX)"
    one_core
}
bench_rounds "${SYSTEMS[@]}"
END=$(date '+%F %T %Z')
ELAPSED=$(($(date +%s) - T0))
cp "$DATA" "$RAWNEW/data.tsv"

# --------------------------------------------------------------- statistics
bench_stats

# -------------------------------------------------------------------- plot
for y in tmx ucx libfabric openmpi; do
    for m in swlat swbw swpbw; do
        awk -F'\t' -v y="$y" -v m="$m" '$1 == y && $2 == m { print $3, $5 }' "$TMP/stats.tsv" | sort -n >"$TMP/p_${y}_$m.dat"
    done
done
for y in memcpy process_vm_readv; do
    awk -F'\t' -v y="$y" '$1 == y && $2 == "bw" { print $3, $5 }' "$TMP/stats.tsv" | sort -n >"$TMP/p_$y.dat"
done
awk -F'\t' '$1 == "openmpi" && $2 == "bw" { print $3, $5 }' "$TMP/stats.tsv" | sort -n >"$TMP/p_openmpi_bw.dat"
PP_US=$(st cacheline lat 64 med)
{
    echo "set terminal pngcairo noenhanced size 1600,720 font 'DejaVu Sans,10'"
    echo "set output '$RAWNEW/shm.png'"
    echo "set multiplot layout 1,2 title 'Shared memory on $(hostname): tmx vs UCX vs libfabric vs Open MPI, cores 0 and 1, median of $ROUNDS round(s), $(date +%F)$([ "$QUICK" = 1 ] && echo ' (QUICK RUN)')'"
    echo "set logscale xy; set grid xtics ytics lc rgb '#dddddd'"
    echo "set xtics ('1' 1, '16' 16, '256' 256, '4K' 4096, '64K' 65536, '1M' 1048576, '16M' 16777216)"
    echo "set xlabel 'message size (bytes)'; set xrange [0.7:16777216*1.5]"
    echo "set style line 1 lc rgb '#d62728' lw 2.5 pt 7 ps 0.6"
    echo "set style line 2 lc rgb '#1f77b4' lw 2 pt 5 ps 0.6"
    echo "set style line 3 lc rgb '#2ca02c' lw 2 pt 9 ps 0.7"
    echo "set style line 4 lc rgb '#9467bd' lw 2 pt 11 ps 0.7"
    echo "set title 'latency, one way (lower is better)'; set ylabel 'microseconds'; set key top left box opaque"
    SEP=""
    printf "plot "
    series "$TMP/p_tmx_swlat.dat" "u 1:2 w lp ls 1 t 'tmx (tmx-perf -t lat)'"
    series "$TMP/p_ucx_swlat.dat" "u 1:2 w lp ls 2 t 'UCX (ucx_perftest tag_lat, mean)'"
    series "$TMP/p_libfabric_swlat.dat" "u 1:2 w lp ls 3 t 'libfabric shm (fi_pingpong)'"
    series "$TMP/p_openmpi_swlat.dat" "u 1:2 w lp ls 4 t 'Open MPI vader (NetPIPE)'"
    [ -z "$PP_US" ] || printf "%s%s w l dt 3 lc rgb 'black' lw 1.5 t 'one cache line, core to core (limit)'" "$SEP" "$PP_US"
    echo
    echo "set title 'bandwidth (higher is better): solid = streaming, dashed = ping-pong (size / one-way time)'"
    echo "set ylabel 'MB/s (10^6 B/s)'; set key bottom right box opaque"
    SEP=""
    printf "plot "
    series "$TMP/p_tmx_swbw.dat" "u 1:2 w lp ls 1 t 'tmx streaming (-t bw, window $WINDOW)'"
    series "$TMP/p_ucx_swbw.dat" "u 1:2 w lp ls 2 t 'UCX streaming (tag_bw -O $WINDOW)'"
    series "$TMP/p_tmx_swpbw.dat" "u 1:2 w lp ls 1 dt 2 t 'tmx ping-pong'"
    series "$TMP/p_ucx_swpbw.dat" "u 1:2 w lp ls 2 dt 2 t 'UCX ping-pong'"
    series "$TMP/p_libfabric_swpbw.dat" "u 1:2 w lp ls 3 dt 2 t 'libfabric ping-pong'"
    series "$TMP/p_openmpi_swpbw.dat" "u 1:2 w lp ls 4 dt 2 t 'Open MPI ping-pong'"
    series "$TMP/p_openmpi_bw.dat" "u 1:2 w p ls 4 pt 13 ps 1.8 t 'Open MPI streaming (NetPIPE -s)'"
    series "$TMP/p_process_vm_readv.dat" "u 1:2 w p pt 6 ps 2.2 lw 2 lc rgb 'black' t 'process_vm_readv (limit)'"
    series "$TMP/p_memcpy.dat" "u 1:2 w p pt 3 ps 2.2 lw 2 lc rgb 'black' t 'memcpy, one core (limit)'"
    echo
    echo "unset multiplot"
} >"$TMP/plot.gp"
sed "s#$TMP/#raw/#g" "$TMP/plot.gp" >"$RAWNEW/plot.gp"
gnuplot "$TMP/plot.gp" 2>"$TMP/gnuplot.err" || { cat "$TMP/gnuplot.err" >&2; fail gnuplot plot 1 "$RAWNEW/plot.gp"; }

# ------------------------------------------------------------------- report
MD=$TMP/shm.md
{
    echo "# Shared memory: tmx vs UCX vs libfabric vs Open MPI"
    echo
    [ "$QUICK" = 1 ] && echo "> **QUICK RUN** (1 round, 1/10 of the iterations): a smoke test of the script, not a result." && echo
    echo "Produced by \`bench/shm.sh$([ "$QUICK" = 1 ] && echo ' --quick')$([ "$ROUNDS" != 3 ] && [ "$QUICK" = 0 ] && echo " -r $ROUNDS")\` in one run: $START to $END ($((ELAPSED / 60)) min $((ELAPSED % 60)) s), $ROUNDS interleaved round(s)."
    echo
    echo "## Machine"
    echo
    echo "| | |"
    echo "|---|---|"
    machine_rows
    echo "| UCX | ucx-utils $(pkgv ucx-utils), UCX_TLS=$UCX_TLS |"
    echo "| libfabric | libfabric-bin $(pkgv libfabric-bin), provider shm |"
    echo "| Open MPI | openmpi-bin $(pkgv openmpi-bin), netpipe-openmpi $(pkgv netpipe-openmpi), pml ob1 + btl vader |"
    echo "| compiler | $(gcc --version | head -1) |"
    echo
    echo "The machine is shared and noisy (its speed drifts over minutes), so every system runs once per"
    echo "round, rounds are interleaved, the order of systems rotates each round, and each table gives the"
    echo "**median over rounds** with min, max and every round's value. The memcpy calibration at the"
    echo "start of each round (last section) shows how much the machine itself moved."
    echo
    echo "## Headline (median over rounds)"
    echo
    echo "| | tmx | UCX | libfabric | Open MPI | limit |"
    echo "|---|---|---|---|---|---|"
    echo "| latency 8 B, one way (us) | **$(fmt us "$(med tmx lat 8)")** | $(fmt us "$(med ucx lat 8)") (mean; median sample $(fmt us "$(med ucx lattyp 8)")) | $(fmt us "$(med libfabric lat 8)") | $(fmt us "$(med openmpi lat 8)") | $(fmt us "$PP_US") (cache-line ping-pong) |"
    echo "| streaming bandwidth 1 MiB (MB/s) | **$(fmt mbs "$(med tmx bw 1048576)")** | $(fmt mbs "$(med ucx bw 1048576)") | n/a (no streaming test) | $(fmt mbs "$(med openmpi bw 1048576)") | $(fmt mbs "$(med process_vm_readv bw 1048576)") (process_vm_readv), $(fmt mbs "$(med memcpy bw 1048576)") (memcpy) |"
    echo "| streaming bandwidth 16 MiB (MB/s) | **$(fmt mbs "$(med tmx bw 16777216)")** | $(fmt mbs "$(med ucx bw 16777216)") | n/a (no streaming test) | $(fmt mbs "$(med openmpi bw 16777216)") | $(fmt mbs "$(med process_vm_readv bw 16777216)") (process_vm_readv), $(fmt mbs "$(med memcpy bw 16777216)") (memcpy) |"
    echo "| ping-pong bandwidth 1 MiB (MB/s) | **$(fmt mbs "$(med tmx pbw 1048576)")** | $(fmt mbs "$(med ucx pbw 1048576)") | $(fmt mbs "$(med libfabric pbw 1048576)") | $(fmt mbs "$(med openmpi pbw 1048576)") | |"
    echo "| ping-pong bandwidth 16 MiB (MB/s) | **$(fmt mbs "$(med tmx pbw 16777216)")** | $(fmt mbs "$(med ucx pbw 16777216)") | $(fmt mbs "$(med libfabric pbw 16777216)") | $(fmt mbs "$(med openmpi pbw 16777216)") | |"
    echo "| message rate 8 B (msg/s) | **$(fmt rate "$(med tmx rate 8)")** | $(fmt rate "$(med ucx rate 8)") | n/a | n/a | |"
    echo "| latency 8 B, both on ONE core (us) | **$(fmt us "$(med tmx lat1 8)")** | $(fmt us "$(med ucx lat1 8)") | not run | not run | |"
    echo
    echo "Streaming: the sender keeps $WINDOW messages in flight (tmx-perf -t bw, ucx_perftest tag_bw -O $WINDOW;"
    echo "NetPIPE -s sends back to back with blocking MPI_Send). Ping-pong bandwidth = size / one-way time"
    echo "of a ping-pong at that size: the only bandwidth fi_pingpong and plain NetPIPE measure, so the"
    echo "ratios against libfabric and Open MPI below use it (like for like)."
    echo
    echo "## Ratios tmx / other (of the medians)"
    echo
    echo "Latency: below 1 means tmx is faster. Bandwidth and rate: above 1 means tmx is faster."
    echo
    echo "| metric | tmx/UCX | tmx/Open MPI | tmx/libfabric |"
    echo "|---|---|---|---|"
    echo "| latency 8 B | $(ratio "$(med tmx lat 8)" "$(med ucx lat 8)") | $(ratio "$(med tmx lat 8)" "$(med openmpi lat 8)") | $(ratio "$(med tmx lat 8)" "$(med libfabric lat 8)") |"
    echo "| latency 8 B vs UCX's median sample (typical) | $(ratio "$(med tmx lat 8)" "$(med ucx lattyp 8)") | | |"
    echo "| streaming bandwidth 1 MiB | $(ratio "$(med tmx bw 1048576)" "$(med ucx bw 1048576)") | $(ratio "$(med tmx bw 1048576)" "$(med openmpi bw 1048576)") (NetPIPE -s) | n/a |"
    echo "| streaming bandwidth 16 MiB | $(ratio "$(med tmx bw 16777216)" "$(med ucx bw 16777216)") | $(ratio "$(med tmx bw 16777216)" "$(med openmpi bw 16777216)") (NetPIPE -s) | n/a |"
    echo "| ping-pong bandwidth 1 MiB | $(ratio "$(med tmx pbw 1048576)" "$(med ucx pbw 1048576)") | $(ratio "$(med tmx pbw 1048576)" "$(med openmpi pbw 1048576)") | $(ratio "$(med tmx pbw 1048576)" "$(med libfabric pbw 1048576)") |"
    echo "| ping-pong bandwidth 16 MiB | $(ratio "$(med tmx pbw 16777216)" "$(med ucx pbw 16777216)") | $(ratio "$(med tmx pbw 16777216)" "$(med openmpi pbw 16777216)") | $(ratio "$(med tmx pbw 16777216)" "$(med libfabric pbw 16777216)") |"
    echo "| message rate 8 B | $(ratio "$(med tmx rate 8)" "$(med ucx rate 8)") | n/a | n/a |"
    echo "| latency 8 B on one core | $(ratio "$(med tmx lat1 8)" "$(med ucx lat1 8)") | | |"
    echo
    echo "## Latency, 8 B, one way (us)"
    echo
    echo "| system | median | min | max | per round | tmx / this |"
    echo "|---|---|---|---|---|---|"
    row "tmx (mean of $N_LAT8 round trips / 2)" tmx lat 8 us lat 8
    row "UCX tag_lat (overall mean / 2)" ucx lat 8 us lat 8
    row "UCX tag_lat (median of last 2048 samples / 2)" ucx lattyp 8 us lat 8
    row "libfabric fi_pingpong (mean / 2)" libfabric lat 8 us lat 8
    row "Open MPI NetPIPE (best of its trials, mean / 2)" openmpi lat 8 us lat 8
    row "limit: one-cache-line ping-pong (best of $LIMIT_TRIALS trials)" cacheline lat 64 us lat 8
    echo
    echo "Distance to the limit: tmx's 8 B one-way latency is $(ratio "$(med tmx lat 8)" "$PP_US") times the"
    echo "cache-line ping-pong ($(fmt ns "$(med tmx lat 8)") ns vs $(fmt ns "$PP_US") ns; the line transfer is"
    echo "the least any shared-memory message costs, one line moved from one core to the other)."
    echo
    for s in 1048576 16777216; do
        sz=$([ $s = 1048576 ] && echo "1 MiB" || echo "16 MiB")
        echo "## Bandwidth, $sz (MB/s = 10^6 bytes/s)"
        echo
        echo "| system | median | min | max | per round | tmx / this |"
        echo "|---|---|---|---|---|---|"
        row "tmx streaming (-t bw, window $WINDOW)" tmx bw $s mbs bw $s
        row "UCX streaming (tag_bw -O $WINDOW)" ucx bw $s mbs bw $s
        row "Open MPI streaming (NetPIPE -s)" openmpi bw $s mbs bw $s
        row "tmx ping-pong (size / one-way latency)" tmx pbw $s mbs pbw $s
        row "UCX ping-pong (tag_lat)" ucx pbw $s mbs pbw $s
        row "libfabric ping-pong (fi_pingpong)" libfabric pbw $s mbs pbw $s
        row "Open MPI ping-pong (NetPIPE)" openmpi pbw $s mbs pbw $s
        row "limit: process_vm_readv, core 1 reads core 0's buffer" process_vm_readv bw $s mbs bw $s
        row "limit: memcpy on one core" memcpy bw $s mbs bw $s
        echo
        echo "Distance to the limits at $sz: tmx streams at $(awk -v a="$(med tmx bw $s)" -v b="$(med process_vm_readv bw $s)" 'BEGIN { if (a != "" && b > 0) printf "%.0f%%", 100 * a / b; else printf "n/a" }') of process_vm_readv"
        echo "and $(awk -v a="$(med tmx bw $s)" -v b="$(med memcpy bw $s)" 'BEGIN { if (a != "" && b > 0) printf "%.0f%%", 100 * a / b; else printf "n/a" }') of one core's memcpy (the ping-pong figure is $(awk -v a="$(med tmx pbw $s)" -v b="$(med process_vm_readv bw $s)" 'BEGIN { if (a != "" && b > 0) printf "%.0f%%", 100 * a / b; else printf "n/a" }') of process_vm_readv)."
        echo
    done
    echo "These limits are one core's. From 128 KiB (the coop protocol of the protocol table) a tmx read is a shared copy:"
    echo "the sender writes chunks into the receive buffer (process_vm_writev) while the receiver"
    echo "reads others, so two cores copy and tmx can pass them."
    echo
    echo "## Message rate, 8 B (msg/s)"
    echo
    echo "| system | median | min | max | per round | tmx / this |"
    echo "|---|---|---|---|---|---|"
    row "tmx (-t rate, window $WINDOW)" tmx rate 8 rate rate 8
    row "UCX (tag_bw -s 8 -O $WINDOW, overall msg rate)" ucx rate 8 rate rate 8
    echo
    echo "## Both processes on ONE core (taskset -c 0 for both), latency 8 B, one way (us)"
    echo
    echo "Busy-polling libraries collapse when the two ranks share a core: each side spins until the"
    echo "scheduler's time slice ends (about 4 ms), so each message costs a slice."
    echo
    echo "| system | median | min | max | per round | tmx / this |"
    echo "|---|---|---|---|---|---|"
    row "tmx ($N_ONE_TMX round trips, tmxrun --timeout 60)" tmx lat1 8 us lat1 8
    row "UCX tag_lat mean ($N_ONE_UCX round trips, timeout 60)" ucx lat1 8 us lat1 8
    row "UCX tag_lat median sample" ucx lat1typ 8 us lat1 8
    if [ -s "$TMP/ucx_timeouts" ] && grep -q onecore "$TMP/ucx_timeouts"; then
        echo
        echo "UCX's one-core run hit the 60 s timeout in $(grep -c onecore "$TMP/ucx_timeouts") round(s) (no figure for those rounds)."
    fi
    echo
    echo "## Calibration: memcpy on core 0 at the start of each round (GB/s, best of 3)"
    echo
    echo "Same program, same sizes, every round: the spread of these figures is how much the machine"
    echo "itself moved during the run. Just before it, the script idles for 1 s and reads how busy"
    echo "other processes kept cores 0 and 1 (this machine is shared): anything well above 0 % means"
    echo "they competed with the round's measurements. raw/shm/r<round>_calibration.txt also has the"
    echo "load average and the busiest processes at that moment."
    echo
    calibration_tables "calibration ${SYSTEMS[*]} onecore"
    echo
    echo "## Size sweeps (median over rounds; plotted in shm.png)"
    echo
    echo "![latency and bandwidth vs size](shm.png)"
    echo
    echo "| size (B) | tmx lat (us) | UCX lat | libfabric lat | Open MPI lat | tmx stream (MB/s) | UCX stream | tmx ping-pong (MB/s) | UCX ping-pong | libfabric ping-pong | Open MPI ping-pong |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    for s in $SWEEP; do
        echo "| $s | $(fmt us "$(med tmx swlat "$s")") | $(fmt us "$(med ucx swlat "$s")") | $(fmt us "$(med libfabric swlat "$s")") | $(fmt us "$(med openmpi swlat "$s")") | $(fmt mbs "$(med tmx swbw "$s")") | $(fmt mbs "$(med ucx swbw "$s")") | $(fmt mbs "$(med tmx swpbw "$s")") | $(fmt mbs "$(med ucx swpbw "$s")") | $(fmt mbs "$(med libfabric swpbw "$s")") | $(fmt mbs "$(med openmpi swpbw "$s")") |"
    done
    echo
    echo "Sweep iteration counts follow tmx-perf's default rule for every system (round trips:"
    echo "min(20000, 2^30 / (size + 1024) / 8), at least 20; streamed messages: 8 times that, at most"
    echo "20000$([ "$QUICK" = 1 ] && echo "; divided by $DIV in this quick run")). NetPIPE picks its own"
    echo "repeat counts in its sweep (only its power-of-two sizes are kept)."
    echo
    echo "## How each figure is measured"
    echo
    echo "- **Pinning.** Every pair runs on cores 0 and 1: tmx ranks through \`bench/pin_rank.sh\`"
    echo "  (\`taskset -c \$TMX_RANK\`: rank r on core r), UCX and libfabric servers with"
    echo "  \`taskset -c 0\` and clients with \`taskset -c 1\`, Open MPI with \`--bind-to core\` (its"
    echo "  \`--report-bindings\` output is in the raw files), the limit probes with sched_setaffinity."
    echo "- **Latency** is one way: a ping-pong's round-trip time / 2. tmx-perf, fi_pingpong (usec/xfer)"
    echo "  and UCX's \"overall\" column are means over all timed round trips; UCX's \"typical\" column"
    echo "  (its 50th percentile) is the median of the last 2048 samples, shown separately; NetPIPE"
    echo "  reports the best (lowest-time) of its internal trials, each a mean. ucx_perftest halves"
    echo "  the round trip for its ping-pong tests (libperf divides by 2 for UCX_PERF_TEST_TYPE_PINGPONG)."
    echo "- **Units.** ucx_perftest prints MiB/s (2^20); converted here to MB/s (10^6). NetPIPE's"
    echo "  Mbps are 2^20 bit/s; bandwidth here is recomputed from its bytes and seconds columns."
    echo "  fi_pingpong's MB/sec is bytes per microsecond = 10^6 B/s."
    echo "- **Warm-up.** tmx-perf warms up with n/10 iterations; ucx_perftest runs with -w n/10;"
    echo "  fi_pingpong and NetPIPE have no separate warm-up beyond what they do themselves."
    echo "- **Buffers** are reused for every message in every tool (no cache invalidation)."
    echo "- **Limits** (bench/limits/, gcc -O2): one 64-bit counter in one cache line of a shared"
    echo "  anonymous mapping, bounced between a parent on core 0 and a child on core 1 with"
    echo "  acquire loads and release stores ($PP_ITERS round trips, best of $LIMIT_TRIALS); memcpy of"
    echo "  a buffer into another on core 0 (best of $LIMIT_TRIALS trials of ${LIMIT_MS} ms);"
    echo "  process_vm_readv of the parent's buffer by the child into its own buffer (same)."
    echo
    echo "## Exact commands (round 1)"
    echo
    echo "Run from the repository root. \`tmx-perf\` is \`build/release/tools/tmx-perf\`; every command is"
    echo "in \`raw/shm/commands.txt\` with its round."
    echo
    echo '```'
    clean_cmd() { sed -e "s#$TMP/limits/#bench/limits/#g" -e "s#$TMP/#\$TMP/#g" -e "s#$ROOT/##g" -e 's/\\,/,/g' -e 's/ *$//'; }
    awk '$1 == "r1" { sub(/^r1  /, ""); print }' "$RAWNEW/commands.txt" | clean_cmd
    echo
    echo "# size sweeps: the first command of each kind; repeated for every size ($(echo $SWEEP | awk '{ print $1 }') to $(echo $SWEEP | awk '{ print $NF }') B)"
    echo "# with the sweep iteration counts (see above); UCX's sweep is one batch file"
    awk '$1 == "r1s" { sub(/^r1s  /, ""); k = $0; gsub(/[0-9]+/, "N", k); if (!seen[k]++) print }' "$RAWNEW/commands.txt" | clean_cmd
    echo
    echo "# the UCX batch files (ucx_main.batch, ucx_sweep.batch, ucx_onecore.batch in raw/shm/):"
    sed 's/^/#   /' "$RAWNEW/ucx_main.batch" 2>/dev/null || true
    echo "#   (ucx_sweep.batch: swlat_SIZE -t tag_lat -s SIZE -n N -w N/10+1 and swbw_SIZE -t tag_bw -s SIZE -n N -w N/10+1 -O $WINDOW per size)"
    echo '```'
    echo
    problems_section
    echo
    echo "Raw outputs: \`raw/shm/\` (r<round>_<system>*.txt, data.tsv with every figure, stats.tsv with"
    echo "the medians, plot.gp)."
} >"$MD"

# ----------------------------------------------------------------- publish
bench_publish
