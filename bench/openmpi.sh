#!/usr/bin/env bash
# bench/openmpi.sh - Open MPI over tmx next to Open MPI's own transports
# (issue 5, part 4).
#
# One MPI program (bench/mpi/osu_p2p.c, OSU-style: ping-pong latency, windowed
# bandwidth, message rate), built with Debian's mpicc, run by Open MPI 4.1.4
# with 2 ranks pinned to cores 0 and 1 in these configurations, in
# interleaved rounds:
#   tmx      pml cm, mtl ofi, provider tmx (build/release/fabric/libtmx-fi.so)
#   vader    pml ob1, btl self,vader (Open MPI's shared memory)
#   ucx      pml ucx (UCX's shared memory)
#   rxm      pml cm, mtl ofi, libfabric's tcp;ofi_rxm over loopback
# and across two test hosts (network namespaces, one rank each):
#   tmxudp   pml cm, mtl ofi, provider tmx (its udp transport between hosts)
#   tcp      pml ob1, btl self,tcp
# plus, as a reference, tmx alone (tmx-perf under tmxrun, no MPI) at the
# headline sizes, and a memcpy calibration figure at the start of every round.
#
# Writes results/openmpi.md, results/openmpi.png and results/raw/openmpi/
# (see bench/README.md). Usage: bench/openmpi.sh [-r ROUNDS] [--quick] [-h]
# Needs root (network namespaces). Shares its helpers with shm.sh and udp.sh
# through bench/lib.sh.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: bench/openmpi.sh [-r ROUNDS] [--quick] [--no-wait] [--no-install] [--no-build] [-o DIR]
  -r ROUNDS     interleaved rounds (default 3); every round runs every configuration once
  --quick       1 round, 1/10 of the iterations, sizes at powers of 4 (and 8 B); writes to
                results/quick/ unless -o is given (a smoke test, not a result)
  --no-wait     do not wait for other processes to leave cores 0 and 1 before each
                step (by default it waits up to 20 s per step, 180 s per run in all)
  --no-install  do not apt-get install missing tools (fail if any is missing)
  --no-build    use the existing build/release/fabric/libtmx-fi.so as it is
  -o DIR        output folder (default bench/results)
Needs root: it makes two network namespaces and a bridge, and removes them on exit.
EOF
}

BENCH=openmpi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
bench_args "$@"
[ "$(id -u)" = 0 ] || { echo "openmpi.sh: needs root (network namespaces)" >&2; exit 1; }
bench_init
bench_need "mpirun mpicc ompi_info ucx_info fi_info gnuplot taskset gcc cmake ip nft" \
    openmpi-bin libopenmpi-dev ucx-utils libfabric-bin libfabric-dev gnuplot-nox util-linux \
    gcc cmake make pkg-config iproute2 nftables
# the commit, and how many tracked files differ from it (the reports in
# bench/results, which a run rewrites, do not count)
TMX_GIT="$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo "?") $(cd "$ROOT" && git status --porcelain --untracked-files=no -- . ':(exclude)bench/results' 2>/dev/null | wc -l)"
bench_staging

# -------------------------------------------------------------------- build
# The provider comes from build/release (built here unless --no-build). If
# that build fails, the provider alone is built from the same sources with
# the same Release flags in the temporary folder, with gcc's
# maybe-uninitialized warning left a warning (the report says so), so that
# one warning elsewhere in the tree cannot stop the measurement. The run
# uses a copy taken now: a rebuild by someone else halfway through cannot
# mix two versions into one report.
PROV_FROM=build/release/fabric PROV_DIR=build/release/fabric PROV_NOTE=""
build_provider_alone() {
    log "building build/release failed (raw/openmpi/build.log); building the provider alone"
    cp "$TMP/build.log" "$RAWNEW/build.log"
    {
        cmake -S "$ROOT" -B "$TMP/build" -DCMAKE_BUILD_TYPE=Release -DTMX_BUILD_TESTS=OFF \
            -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build "$TMP/build" -j2 --target tmx-fi
    } >>"$RAWNEW/build.log" 2>&1 || {
        tail -30 "$RAWNEW/build.log" >&2
        echo "openmpi.sh: building the tmx provider failed" >&2
        exit 1
    }
    PROV_SO=$TMP/build/fabric/libtmx-fi.so PROV_DIR=PROVIDER_DIR
    PROV_FROM="the same sources built alone (cmake -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized --target tmx-fi)"
    PROV_NOTE="build/release did not build ($(grep -m1 -o 'error: .*' "$TMP/build.log" | cut -c1-160 || echo "see raw/openmpi/build.log")); this run's provider was built alone from the same sources with the same Release flags (-O3), that warning not fatal (PROVIDER_DIR in the commands below)"
}
omb_build() {
    PROV_SO=$ROOT/build/release/fabric/libtmx-fi.so
    if [ "$BUILD" = 1 ]; then
        log "building tmx (release)"
        (cd "$ROOT" && cmake --preset release >/dev/null && cmake --build build/release -j2 >"$TMP/build.log" 2>&1) ||
            build_provider_alone
    fi
    [ -f "$PROV_SO" ] || { echo "openmpi.sh: $PROV_SO missing (build tmx first, or drop --no-build)" >&2; exit 1; }
    TMX_BUILT=$(date -r "$PROV_SO" '+%F %T %Z')
    mkdir -p "$TMP/fabric" "$TMP/bin"
    cp "$PROV_SO" "$TMP/fabric/"
    # tmx alone, the reference (tmx-perf links libtmx statically)
    [ -x "$PERF" ] && [ -x "$TMXRUN" ] || { echo "openmpi.sh: $PERF or $TMXRUN missing" >&2; exit 1; }
    cp "$PERF" "$TMXRUN" "$TMP/bin/"
    PERF=$TMP/bin/tmx-perf TMXRUN=$TMP/bin/tmxrun
    bench_limits memcpy_bw
    OSU=$TMP/osu_p2p
    mpicc -O2 -Wall -Wextra -o "$OSU" "$HERE/mpi/osu_p2p.c"
}
omb_build

# ------------------------------------------------------------- test hosts
# Two hosts made by tests/fault/hosts.sh, as tests/mpi/run_mpi.sh makes them;
# Open MPI's launcher reaches them through tests/mpi/netns_agent.sh (each
# host a namespace with its own host name). Removed on exit by the trap,
# with whatever still runs inside.
FAULT_PREFIX="tmxob$$"
# shellcheck source=../tests/fault/hosts.sh
. "$ROOT/tests/fault/hosts.sh" || exit 1
NS1=$FAULT_PREFIX-h1 NS2=$FAULT_PREFIX-h2
HOSTS_UP=0
bench_cleanup_extra() { [ "$HOSTS_UP" = 0 ] || fault_hosts_down; }
HOSTS_UP=1
fault_hosts_up 2 || exit 1
HOSTFILE=$TMP/hostfile
printf '%s slots=1\n%s slots=1\n' "$NS1" "$NS2" >"$HOSTFILE"

# ------------------------------------------------------------------- sizes
if [ "$QUICK" = 1 ]; then
    DIV=10
    SIZES="1 4 8 16 64 256 1024 4096 16384 65536 262144 1048576 4194304 16777216"
else
    DIV=1
    SIZES=$(awk 'BEGIN { for (s = 1; s <= 16777216; s *= 2) printf "%d ", s }')
fi
SIZES_CSV=$(echo $SIZES | tr ' ' ',')
WINDOW=64
OMB_TO=300               # bound on one mpirun (s): every size of every test
OSU_ARGS=(-p -t lat,bw,rate -s "$SIZES_CSV" -w $WINDOW -r 8 -d $DIV)

# ----------------------------------------------------------- configurations
# Every job: 2 ranks, --bind-to none (osu_p2p -p pins rank r to core r
# itself, before MPI_Init: Open MPI's --bind-to core cannot put the rank of
# the second namespace host on core 1), and the pml's choice printed.
MPIRUN=(mpirun --allow-run-as-root -n 2 --bind-to none --timeout "$OMB_TO" --mca pml_base_verbose 10)
HOSTSOPT=(--hostfile "$HOSTFILE" --map-by node --mca plm_rsh_agent "$ROOT/tests/mpi/netns_agent.sh"
    --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include "$FAULT_NET.0/24")
OFI=(--mca pml cm --mca mtl ofi --mca mtl_base_verbose 1)
declare -A CONF PML DOMAIN WHERE LABEL
CONF[tmx]="${OFI[*]} --mca mtl_ofi_provider_include tmx -x FI_PROVIDER_PATH=$TMP/fabric"
PML[tmx]=cm DOMAIN[tmx]=tmx WHERE[tmx]=local LABEL[tmx]="Open MPI over tmx (shm)"
CONF[vader]="--mca pml ob1 --mca btl self,vader"
PML[vader]=ob1 DOMAIN[vader]="" WHERE[vader]=local LABEL[vader]="ob1 + btl vader"
CONF[ucx]="--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any"
PML[ucx]=ucx DOMAIN[ucx]="" WHERE[ucx]=local LABEL[ucx]="pml ucx"
CONF[rxm]="${OFI[*]} --mca mtl_ofi_provider_include tcp;ofi_rxm -x FI_PROVIDER=tcp;ofi_rxm -x FI_TCP_IFACE=lo"
PML[rxm]=cm DOMAIN[rxm]=lo WHERE[rxm]=local LABEL[rxm]="mtl ofi tcp;ofi_rxm (loopback)"
CONF[tmxudp]="${CONF[tmx]}"
PML[tmxudp]=cm DOMAIN[tmxudp]=tmx WHERE[tmxudp]=hosts LABEL[tmxudp]="2 hosts: Open MPI over tmx (udp)"
CONF[tcp]="--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include $FAULT_NET.0/24"
PML[tcp]=ob1 DOMAIN[tcp]="" WHERE[tcp]=hosts LABEL[tcp]="2 hosts: ob1 + btl tcp"

# Did the job run where and how it was meant to? Prints what is wrong.
omb_check() { # SYSTEM FILE
    local y=$1 f=$2 n h0 h1
    n=$(grep -c "select: component ${PML[$y]} selected" "$f" || true)
    [ "$n" = 2 ] || echo "$n of 2 ranks report pml ${PML[$y]}"
    if [ -n "${DOMAIN[$y]}" ]; then
        n=$(grep -c "mtl:ofi:provider: ${DOMAIN[$y]}\$" "$f" || true)
        [ "$n" = 2 ] || echo "$n of 2 ranks report the ofi domain ${DOMAIN[$y]}"
    fi
    grep -q '^# rank 0 on .*, cores 0$' "$f" && grep -q '^# rank 1 on .*, cores 1$' "$f" ||
        echo "ranks not on cores 0 and 1"
    h0=$(sed -n 's/^# rank 0 on \(.*\), cores .*/\1/p' "$f")
    h1=$(sed -n 's/^# rank 1 on \(.*\), cores .*/\1/p' "$f")
    if [ "${WHERE[$y]}" = hosts ]; then
        [ "$h0" = "$NS1" ] && [ "$h1" = "$NS2" ] || echo "ranks on '$h0' and '$h1', not $NS1 and $NS2"
    else
        [ -n "$h0" ] && [ "$h0" = "$h1" ] || echo "ranks on '$h0' and '$h1', not one host"
    fi
}
omb_parse() { # SYSTEM FILE: CSV rows -> records
    awk -F, '$1 == "lat" && $2 ~ /^[0-9]+$/ && NF == 7 {
            print "lat\t" $2 "\t" $4; print "latmed\t" $2 "\t" $5
            print "latp99\t" $2 "\t" $6; print "latmin\t" $2 "\t" $7
            printf "pbw\t%s\t%.3f\n", $2, $2 / $4 }
        $1 == "bw" && $2 ~ /^[0-9]+$/ && NF == 5 { print "bw\t" $2 "\t" $4 }
        $1 == "rate" && $2 ~ /^[0-9]+$/ && NF >= 5 { print "rate\t" $2 "\t" $5 }' "$2" |
        while IFS=$'\t' read -r m s v; do rec "$1" "$m" "$s" "$v"; done
}
# UDP datagrams each host sent during a step (nft counters, nothing dropped).
udp_count_start() { local ns; for ns in "$NS1" "$NS2"; do fault_nft_clear "$ns"; fault_nft_drop "$ns" 0 || true; done; }
udp_count_end() { # SYSTEM FILE
    local a b
    a=$(fault_nft_counts "$NS1" | cut -d' ' -f1) b=$(fault_nft_counts "$NS2" | cut -d' ' -f1)
    echo "nft: UDP datagrams sent during this job: host 1 $a, host 2 $b" >>"$2"
    rec "$1" udpsent 1 "$a"
    rec "$1" udpsent 2 "$b"
    fault_nft_clear "$NS1"
    fault_nft_clear "$NS2"
    UDP_SENT="$a $b"
}
sys_run() { # SYSTEM
    local y=$1 f=$RAWNEW/r${ROUND}_$1.txt o=$TMP/job.txt bad opts
    read -r -a opts <<<"${CONF[$y]}"
    [ "${WHERE[$y]}" = local ] || opts+=("${HOSTSOPT[@]}")
    [ "${WHERE[$y]}" = local ] || udp_count_start
    : >"$o"
    run "$o" timeout -k 5 $((OMB_TO + 20)) "${MPIRUN[@]}" "${opts[@]}" "$OSU" "${OSU_ARGS[@]}"
    [ "${WHERE[$y]}" = local ] || udp_count_end "$y" "$o"
    cat "$o" >>"$f"
    bad=$(omb_check "$y" "$o")
    if [ "$y" = tmxudp ] && [ "$(echo "$UDP_SENT" | awk '{ print ($1 >= 100 && $2 >= 100) }')" != 1 ]; then
        bad="$bad${bad:+; }hosts sent only $UDP_SENT UDP datagrams"
    fi
    if [ -n "$bad" ]; then
        fail "$y" "$(echo "$bad" | tr '\n' ';' | sed 's/;$//') (figures not kept)" "$RC" "$f"
        return
    fi
    [ $RC = 0 ] || fail "$y" "mpirun (exit $RC; the sizes it finished are kept)" "$RC" "$f"
    grep -q '^# osu_p2p done' "$o" || [ $RC != 0 ] || fail "$y" "osu_p2p did not finish" 0 "$f"
    omb_parse "$y" "$o"
}

# The 8 B message rate with P pairs of ranks on this host at once (rank r
# with rank r + P; osu_p2p sums the pairs' rates), over tmx and over vader.
# Ranks are pinned to core r modulo 2, so from 2 pairs on they share cores:
# every rank yields when idle (mpi_yield_when_idle), as Open MPI advises
# when ranks outnumber cores.
PAIRS="4 16"
pairs_run() { # SYSTEM PAIRS
    local y=$1 p=$2 f=$RAWNEW/r${ROUND}_$1_pairs$2.txt o=$TMP/job.txt opts n v
    read -r -a opts <<<"${CONF[$y]}"
    : >"$o"
    run "$o" timeout -k 5 $((OMB_TO + 20)) mpirun --allow-run-as-root -n $((2 * p)) --oversubscribe --bind-to none \
        --timeout "$OMB_TO" --mca pml_base_verbose 10 --mca mpi_yield_when_idle 1 "${opts[@]}" \
        "$OSU" -p -t rate -r 8 -w $WINDOW -d $((DIV * 4))
    cat "$o" >>"$f"
    n=$(grep -c "select: component ${PML[$y]} selected" "$o" || true)
    if [ "$n" != $((2 * p)) ]; then
        fail "${y}_pairs$p" "$n of $((2 * p)) ranks report pml ${PML[$y]} (figures not kept)" "$RC" "$f"
        return
    fi
    [ $RC = 0 ] || { fail "${y}_pairs$p" "mpirun (exit $RC)" "$RC" "$f"; return; }
    v=$(awk -F, -v p="$p" '$1 == "rate" && $2 == 8 && NF == 6 && $6 == p { print $5 }' "$o")
    [ -n "$v" ] || { fail "${y}_pairs$p" "no rate row for $p pairs" 0 "$f"; return; }
    rec "$y" "rate$p" 8 "$v"
}
sys_pairs() { local y p; for y in tmx vader; do for p in $PAIRS; do pairs_run "$y" "$p"; done; done; }

# tmx alone: tmx-perf over shm, pinned like the ranks, with the round trips
# and messages osu_p2p uses at these sizes (tmx-perf warms up the same way).
# Both bandwidth sizes in one run, so that tmx-perf's buffers are sized for
# 16 MiB (on huge pages) like osu_p2p's: a 1 MiB buffer of its own would
# not be, and process_vm_readv is slower on small pages.
osu_lat_n() { awk -v s="$1" -v d="$DIV" 'BEGIN { n = int(268435456 / (s + 1024)); if (n > 10000) n = 10000; n = int(n / d); print (n < 20 ? 20 : n) }'; }
osu_windows() { awk -v s="$1" -v d="$DIV" -v w="$WINDOW" 'BEGIN { n = int(1073741824 / ((s + 1024) * w)); if (n > 200) n = 200; n = int(n / d); print (n < 2 ? 2 : n) }'; }
sys_tmxperf() {
    local f=$RAWNEW/r${ROUND}_tmxperf.txt o=$TMP/job.txt t s n
    : >"$o"
    for t in "lat 8 $(osu_lat_n 8)" "bw 1048576,16777216 $(($(osu_windows 1048576) * WINDOW))" \
        "rate 8 $((10 * $(osu_windows 8) * WINDOW))"; do
        read -r t s n <<<"$t"
        run "$o" "$TMXRUN" -n 2 --timeout 120 "$HERE/pin_rank.sh" "$PERF" -t "$t" -s "$s" -n "$n" -w $WINDOW -x shm --csv
        [ $RC = 0 ] || fail tmxperf "-t $t -s $s" "$RC" "$f"
    done
    cat "$o" >>"$f"
    # test,transport,size,iterations,value,unit
    awk -F, '$2 == "shm" && NF == 6 && $3 ~ /^[0-9]+$/ {
        m = ($1 == "lat_p50" ? "latmed" : $1 == "lat_p99" ? "latp99" : $1); print m "\t" $3 "\t" $5 }' "$o" |
        while IFS=$'\t' read -r m s v; do rec tmxperf "$m" "$s" "$v"; done
}

# ------------------------------------------------------------------- rounds
{
    echo "host 1: $NS1, eth0 $FAULT_NET.1/24; host 2: $NS2, eth0 $FAULT_NET.2/24; bridge $FAULT_BR $FAULT_KVS/24"
    ip -n "$NS1" addr show eth0
    ip -n "$NS2" addr show eth0
    echo "hostfile:"; cat "$HOSTFILE"
    echo "provider: copied from $PROV_FROM at the start of the run (built $TMX_BUILT):"
    (cd "$TMP/fabric" && sha256sum libtmx-fi.so)
    echo "tmx-perf and tmxrun (the reference), copied from build/release/tools at the start:"
    (cd "$TMP/bin" && sha256sum tmx-perf tmxrun)
    echo "osu_p2p: $(mpicc --showme:command) -O2 -Wall -Wextra bench/mpi/osu_p2p.c ($(mpicc --showme | cut -c1-200))"
    echo "ompi_info: $(ompi_info --parsable --param btl vader --level 9 2>/dev/null | grep 'single_copy_mechanism:value' | head -1)"
    echo "ucx_info -v:"; ucx_info -v
    echo "fi_info --version:"; fi_info --version
} >"$RAWNEW/hosts.txt" 2>&1
VADER_COPY=$(ompi_info --parsable --param btl vader --level 9 2>/dev/null |
    awk -F: '$0 ~ /single_copy_mechanism:value:/ { print $NF; exit }')
START=$(date '+%F %T %Z')
T0=$(date +%s)
SYSTEMS=(tmx vader ucx rxm tmxudp tcp)
# tmx and the two it is held against on one host run back to back, in an
# order that rotates from round to round, so that each round's ratios
# compare figures taken within a minute (the targets use their median)
NEAR=(tmx vader ucx)
STEPS=(near rxm tmxudp tcp tmxperf pairs)
log "output: $OUT (rounds: $ROUNDS$([ "$QUICK" = 1 ] && echo ', quick')); hosts $NS1, $NS2"
for sys in "${SYSTEMS[@]}"; do eval "sys_$sys() { sys_run $sys; }"; done
sys_near() {
    local k y
    for k in 0 1 2; do
        y=${NEAR[$(((k + ROUND - 1) % 3))]}
        quiet "$y"
        log "round $ROUND/$ROUNDS: $y"
        "sys_$y"
    done
}
bench_rounds "${STEPS[@]}"
END=$(date '+%F %T %Z')
ELAPSED=$(($(date +%s) - T0))
cp "$DATA" "$RAWNEW/data.tsv"

# --------------------------------------------------------------- statistics
bench_stats

# -------------------------------------------------------------------- plot
for y in "${SYSTEMS[@]}"; do
    for m in lat latmed bw; do
        awk -F'\t' -v y="$y" -v m="$m" '$1 == y && $2 == m { print $3, $5 }' "$TMP/stats.tsv" | sort -n >"$TMP/p_${y}_$m.dat"
    done
done
{
    echo "set terminal pngcairo noenhanced size 2100,720 font 'DejaVu Sans,10'"
    echo "set output '$RAWNEW/openmpi.png'"
    echo "set multiplot layout 1,3 title 'Open MPI 4.1.4, osu_p2p, 2 ranks on cores 0 and 1 of $(hostname): over tmx vs its own transports, median of $ROUNDS round(s), $(date +%F)$([ "$QUICK" = 1 ] && echo ' (QUICK RUN)')'"
    echo "set logscale xy; set grid xtics ytics lc rgb '#dddddd'"
    echo "set xtics ('1' 1, '16' 16, '256' 256, '4K' 4096, '64K' 65536, '1M' 1048576, '16M' 16777216)"
    echo "set xlabel 'message size (bytes)'; set xrange [0.7:16777216*1.5]"
    echo "set style line 1 lc rgb '#d62728' lw 2.5 pt 7 ps 0.6"
    echo "set style line 2 lc rgb '#1f77b4' lw 2 pt 5 ps 0.6"
    echo "set style line 3 lc rgb '#2ca02c' lw 2 pt 9 ps 0.7"
    echo "set style line 4 lc rgb '#ff7f0e' lw 2 pt 11 ps 0.7"
    echo "set style line 5 lc rgb '#d62728' lw 2 dt 2 pt 6 ps 0.7"
    echo "set style line 6 lc rgb '#7f7f7f' lw 2 dt 2 pt 4 ps 0.7"
    for m in lat latmed bw; do
        if [ $m = lat ]; then
            echo "set title 'latency, one way: mean of the round trips / 2 (lower is better)'; set ylabel 'microseconds'; set key top left box opaque"
        elif [ $m = latmed ]; then
            echo "set title 'latency, one way: median round trip / 2 (lower is better)'"
        else
            echo "set title 'bandwidth, windows of $WINDOW MPI_Isend + ack (higher is better)'; set ylabel 'MB/s (10^6 B/s)'; set key bottom right box opaque"
        fi
        SEP=""
        printf "plot "
        i=0
        for y in "${SYSTEMS[@]}"; do
            i=$((i + 1))
            series "$TMP/p_${y}_$m.dat" "u 1:2 w lp ls $i t '${LABEL[$y]}'"
        done
        echo
    done
    echo "unset multiplot"
} >"$TMP/plot.gp"
sed "s#$TMP/#raw/#g" "$TMP/plot.gp" >"$RAWNEW/plot.gp"
gnuplot "$TMP/plot.gp" 2>"$TMP/gnuplot.err" || { cat "$TMP/gnuplot.err" >&2; fail gnuplot plot 1 "$RAWNEW/plot.gp"; }

# ------------------------------------------------------------------- report
MD=$TMP/openmpi.md
human() { awk -v s="$1" 'BEGIN { if (s >= 1048576) printf "%d MiB", s / 1048576; else if (s >= 1024) printf "%d KiB", s / 1024; else printf "%d B", s }'; }
# "**median** (min-max; r1 / r2 / r3)" for one figure
cell() { # SYSTEM METRIC SIZE KIND
    local m
    m=$(med "$1" "$2" "$3")
    [ -n "$m" ] || { echo "n/a"; return; }
    if [ "$(st "$1" "$2" "$3" n)" = 1 ]; then echo "**$(fmt "$4" "$m")**"; return; fi
    echo "**$(fmt "$4" "$m")** ($(fmt "$4" "$(st "$1" "$2" "$3" min)")-$(fmt "$4" "$(st "$1" "$2" "$3" max)"); $(fmtlist "$4" "$(st "$1" "$2" "$3" list)"))"
}
# others' use of cores 0 and 1 before the measured steps: "median A % / B % (max C % / D %)"
busy_summary() {
    awk -F'\t' '$2 != "calibration" { n++; a[n] = $3; b[n] = $4 }
        function med(v, n,   i, j, t) { for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
            return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
        END { if (!n) { printf "n/a"; exit } printf "%.0f %% / %.0f %% (median over %d steps)", med(a, n), med(b, n), n }' "$TMP/busy.tsv"
}
# the targets: latency within 1.05x of vader's (lat) or at most ucx's (ucx),
# bandwidth and rate at or above (bw)
verdict() { # lat|ucx|bw RATIO
    awk -v k="$1" -v r="$2" 'BEGIN { if (r == "n/a" || r == "") { print "n/a"; exit }
        if (k == "lat") print (r <= 1.05 ? "met" : "**not met**"); else if (k == "ucx") print (r <= 1 ? "met" : "**not met**")
        else print (r >= 1 ? "met" : "**not met**") }'
}
{
    echo "# Open MPI over tmx vs Open MPI's own transports"
    echo
    [ "$QUICK" = 1 ] && echo "> **QUICK RUN** (1 round, 1/10 of the iterations, sizes at powers of 4): a smoke test of the script, not a result." && echo
    echo "Produced by \`bench/openmpi.sh$([ "$QUICK" = 1 ] && echo ' --quick')$([ "$ROUNDS" != 3 ] && [ "$QUICK" = 0 ] && echo " -r $ROUNDS")$([ "$BUILD" = 0 ] && echo ' --no-build')\` in one run: $START to $END ($((ELAPSED / 60)) min $((ELAPSED % 60)) s), $ROUNDS interleaved round(s)."
    echo
    echo "One MPI program, \`bench/mpi/osu_p2p.c\` (OSU-style: ping-pong latency, windowed bandwidth, message"
    echo "rate), built once with Debian's \`mpicc -O2\` and run by Open MPI 4.1.4 (\`mpirun -n 2\`) in every"
    echo "configuration below; only the \`--mca\` options and the environment change."
    echo
    echo "## Machine and software"
    echo
    echo "| | |"
    echo "|---|---|"
    machine_rows
    echo "| tmx provider | libtmx-fi.so from $PROV_FROM, copied at the start of the run (sha256 in raw/openmpi/hosts.txt) |"
    echo "| Open MPI | openmpi-bin $(pkgv openmpi-bin), libopenmpi3 $(pkgv libopenmpi3) |"
    echo "| UCX (pml ucx) | libucx0 $(pkgv libucx0) |"
    echo "| libfabric | libfabric1 $(pkgv libfabric1) (Open MPI's mtl ofi, the tmx provider and \`tcp;ofi_rxm\`) |"
    echo "| compiler | $(mpicc --version | head -1) (mpicc) |"
    echo "| test hosts | two network namespaces, each with eth0, one end of a veth pair into a bridge in the root namespace (tests/fault/hosts.sh), $FAULT_NET.1/24 and .2/24, MTU $(ip -n "$NS1" link show eth0 | awk '/mtu/ { for (i = 1; i <= NF; i++) if ($i == "mtu") print $(i + 1) }'); Open MPI's launcher reaches them through tests/mpi/netns_agent.sh |"
    echo
    [ -z "$PROV_NOTE" ] || { echo "**Provider build:** $PROV_NOTE." && echo; }
    echo "## Configurations"
    echo
    echo "Every job: \`mpirun --allow-run-as-root -n 2 --bind-to none --mca pml_base_verbose 10 ... osu_p2p -p\`."
    echo "**Pinning:** osu_p2p \`-p\` pins rank r to core r itself (sched_setaffinity, before MPI_Init, so"
    echo "every thread the library starts inherits it), for every configuration alike; \`--bind-to core\` is"
    echo "not used because each namespace host's daemon would bind its one rank to core 0. Each rank prints"
    echo "its host and cores, and the script checks them, the pml each rank selected (\`pml_base_verbose\`)"
    echo "and, over mtl ofi, the domain each rank opened (\`mtl_base_verbose\`: \`tmx\` for the tmx provider,"
    echo "\`lo\` for tcp;ofi_rxm); a job that ran otherwise is listed under Problems and its figures dropped."
    echo
    echo "| name | where | options |"
    echo "|---|---|---|"
    for y in "${SYSTEMS[@]}"; do
        echo "| ${LABEL[$y]} | $([ "${WHERE[$y]}" = local ] && echo "one host, cores 0 and 1" || echo "rank 0 in host 1 (core 0), rank 1 in host 2 (core 1)") | \`$(echo "${CONF[$y]}" | sed -e "s#$TMP/fabric#$PROV_DIR#" -e "s#$FAULT_NET#NET#" -e "s/tcp;ofi_rxm/'tcp;ofi_rxm'/g")\` |"
    done
    echo
    echo "- **vader's single-copy mechanism**: Debian's default, \`btl_vader_single_copy_mechanism\` = ${VADER_COPY:-?}"
    echo "  (CMA, process_vm_readv, for messages above its eager limit; xpmem and knem are not packaged)."
    echo "- **pml ucx**: UCX picks its own transports (UCX_TLS unset: shared memory and CMA between two"
    echo "  ranks of one host); \`pml_ucx_tls any\` and \`pml_ucx_devices any\` let pml ucx run without an"
    echo "  InfiniBand device, which it otherwise requires."
    echo "- **tmx**: within one host the provider uses tmx's shm transport; across the two test hosts its"
    echo "  udp transport. The script counts the UDP datagrams each host sent during that job (nft counters,"
    echo "  nothing dropped): $(for r in $(seq 1 "$ROUNDS"); do a=$(awk -F'\t' -v r="$r" '$1 == r && $2 == "tmxudp" && $3 == "udpsent" && $4 == 1 { print $5 }' "$DATA"); b=$(awk -F'\t' -v r="$r" '$1 == r && $2 == "tmxudp" && $3 == "udpsent" && $4 == 2 { print $5 }' "$DATA"); printf 'round %s: %s and %s; ' "$r" "${a:-n/a}" "${b:-n/a}"; done | sed 's/; $//')."
    echo "- **ob1 + btl tcp** across the hosts: TCP over the same veths and bridge."
    echo
    echo "## Headline (median over rounds)"
    echo
    echo "| | Open MPI over tmx (shm) | ob1 + vader | pml ucx | tcp;ofi_rxm | 2 hosts: over tmx (udp) | 2 hosts: ob1 + tcp | reference: tmx alone (tmx-perf, shm, no MPI) |"
    echo "|---|---|---|---|---|---|---|---|"
    echo "| latency 8 B, one way, mean (us) $(for y in "${SYSTEMS[@]}" tmxperf; do printf '| %s ' "$(fmt us "$(med "$y" lat 8)")"; done)|"
    echo "| latency 8 B, median (us) $(for y in "${SYSTEMS[@]}" tmxperf; do printf '| %s ' "$(fmt us "$(med "$y" latmed 8)")"; done)|"
    echo "| latency 8 B, 99th percentile (us) $(for y in "${SYSTEMS[@]}" tmxperf; do printf '| %s ' "$(fmt us "$(med "$y" latp99 8)")"; done)|"
    echo "| bandwidth 1 MiB (MB/s) $(for y in "${SYSTEMS[@]}" tmxperf; do printf '| %s ' "$(fmt mbs "$(med "$y" bw 1048576)")"; done)|"
    echo "| bandwidth 16 MiB (MB/s) $(for y in "${SYSTEMS[@]}" tmxperf; do printf '| %s ' "$(fmt mbs "$(med "$y" bw 16777216)")"; done)|"
    echo "| message rate 8 B (msg/s) $(for y in "${SYSTEMS[@]}" tmxperf; do printf '| %s ' "$(fmt rate "$(med "$y" rate 8)")"; done)|"
    echo
    echo "The reference column is tmx without MPI: \`tmx-perf -x shm\` under \`tmxrun -n 2 bench/pin_rank.sh\` (ranks on"
    echo "cores 0 and 1), with the round trips and messages osu_p2p uses at these sizes (at 16 MiB as many"
    echo "messages as at 1 MiB: one run for both, so that its buffers, like osu_p2p's, are 16 MiB on huge pages). Against it, Open MPI"
    echo "over tmx (pml cm, mtl ofi, the provider, then tmx) costs $(awk -v a="$(med tmx lat 8)" -v b="$(med tmxperf lat 8)" 'BEGIN { if (a != "" && b != "") printf "%.2f us", a - b; else printf "n/a" }') more per message at 8 B (mean; $(awk -v a="$(med tmx latmed 8)" -v b="$(med tmxperf latmed 8)" 'BEGIN { if (a != "" && b != "") printf "%.2f us", a - b; else printf "n/a" }') on the medians),"
    echo "a latency ratio of $(ratio "$(med tmx lat 8)" "$(med tmxperf lat 8)"), and reaches $(pct_of "$(med tmx rate 8)" "$(med tmxperf rate 8)") of tmx's own message rate and $(pct_of "$(med tmx bw 1048576)" "$(med tmxperf bw 1048576)") / $(pct_of "$(med tmx bw 16777216)" "$(med tmxperf bw 16777216)")"
    echo "of its bandwidth at 1 MiB / 16 MiB."
    echo
    echo "Other processes (this machine is shared) kept cores 0 and 1 busy $(busy_summary) just before the steps;"
    echo "see the calibration section at the end, which has every step's figure."
    echo
    echo "## Ratios: Open MPI over tmx / other (median of the rounds' ratios)"
    echo
    echo "Latency: below 1 means Open MPI over tmx is faster. Bandwidth and rate: above 1 means it is faster."
    echo
    echo "| metric | tmx / vader | tmx / ucx | tmx / tcp;ofi_rxm | 2 hosts: tmx (udp) / ob1 + tcp |"
    echo "|---|---|---|---|---|"
    for m in "lat 8 latency 8 B (mean)" "latmed 8 latency 8 B (median)" "bw 1048576 bandwidth 1 MiB" "bw 16777216 bandwidth 16 MiB" "rate 8 message rate 8 B"; do
        read -r mm ss label <<<"$m"
        echo "| $label | $(rratio tmx vader "$mm" "$ss") | $(rratio tmx ucx "$mm" "$ss") | $(rratio tmx rxm "$mm" "$ss") | $(rratio tmxudp tcp "$mm" "$ss") |"
    done
    echo
    echo "## Message rate at 8 B with 1, $(echo $PAIRS | sed 's/ / and /') pairs of ranks (msg/s, sum over the pairs; median over rounds)"
    echo
    echo "All pairs on this host at once, rank r with rank r + P, pinned to core r mod 2: from 2 pairs on the"
    echo "ranks share the 2 cores, and every rank yields when idle (\`--mca mpi_yield_when_idle 1 --oversubscribe\`)."
    echo "1 pair is the rate of the tables above (no yield)."
    echo
    echo "| pairs | Open MPI over tmx | ob1 + vader | tmx / vader |"
    echo "|---|---|---|---|"
    echo "| 1 | $(cell tmx rate 8 rate) | $(cell vader rate 8 rate) | $(rratio tmx vader rate 8) |"
    for p in $PAIRS; do
        echo "| $p | $(cell tmx "rate$p" 8 rate) | $(cell vader "rate$p" 8 rate) | $(rratio tmx vader "rate$p" 8) |"
    done
    echo
    echo "### The targets: Open MPI over tmx against Open MPI's own transports"
    echo
    echo "Mean latency at most 1.05x ob1 + vader's from 1 B to 1 KiB and at most pml ucx's from 8 KiB to"
    echo "64 KiB; the 8 B message rate at or above vader's; bandwidth at or above vader's from 1 MiB up."
    echo
    echo "Latency is given as the mean (as OSU reports it) and as the median round trip, which a"
    echo "preempted round trip on this shared machine does not move. The figures are medians over rounds;"
    echo "the ratio is the median of the rounds' ratios (the two run back to back in each round)."
    echo
    echo "| target | over tmx | ob1 + vader | tmx / vader | target met? |"
    echo "|---|---|---|---|---|"
    for s in $SIZES; do
        [ "$s" -le 1024 ] || continue
        for m in lat latmed; do
            r=$(rratio tmx vader $m "$s")
            echo "| latency $(human "$s") (us, $([ $m = lat ] && echo mean || echo median)) | $(fmt us "$(med tmx $m "$s")") | $(fmt us "$(med vader $m "$s")") (vader) | $r (&le; 1.05) | $([ $m = lat ] && verdict lat "$r" || echo "-") |"
        done
    done
    for s in $SIZES; do
        [ "$s" -ge 8192 ] && [ "$s" -le 65536 ] || continue
        r=$(rratio tmx ucx lat "$s")
        echo "| latency $(human "$s") (us, mean) | $(fmt us "$(med tmx lat "$s")") | $(fmt us "$(med ucx lat "$s")") (ucx) | $r (&le; 1) | $(verdict ucx "$r") |"
    done
    r=$(rratio tmx vader rate 8)
    echo "| message rate 8 B (msg/s) | $(fmt rate "$(med tmx rate 8)") | $(fmt rate "$(med vader rate 8)") (vader) | $r (&ge; 1) | $(verdict bw "$r") |"
    for s in $SIZES; do
        [ "$s" -ge 1048576 ] || continue
        r=$(rratio tmx vader bw "$s")
        echo "| bandwidth $(human "$s") (MB/s) | $(fmt mbs "$(med tmx bw "$s")") | $(fmt mbs "$(med vader bw "$s")") | $r (&ge; 1) | $(verdict bw "$r") |"
    done
    echo
    echo "## Per-message cost by layer, before and after"
    echo
    echo "From \`bench/results/cost.md\` (\`bench/cost.sh -o bench/results/cost.md OLD NEW\`, run"
    echo "separately: callgrind's counts do not depend on the rounds above)."
    echo
    if [ -f "$HERE/results/cost.md" ]; then
        cat "$HERE/results/cost.md"
    else
        echo "Not measured yet."
    fi
    echo
    echo "## Latency by size, one way, mean (us; median over rounds)"
    echo
    echo "| size $(for y in "${SYSTEMS[@]}"; do printf '| %s ' "${LABEL[$y]}"; done)| tmx / vader | tmx udp / tcp |"
    echo "|---$(for y in "${SYSTEMS[@]}"; do printf '|---'; done)|---|---|"
    for s in $SIZES; do
        echo "| $(human "$s") $(for y in "${SYSTEMS[@]}"; do printf '| %s ' "$(fmt us "$(med "$y" lat "$s")")"; done)| $(rratio tmx vader lat "$s") | $(rratio tmxudp tcp lat "$s") |"
    done
    echo
    echo "## Bandwidth by size, windows of $WINDOW (MB/s; median over rounds)"
    echo
    echo "| size $(for y in "${SYSTEMS[@]}"; do printf '| %s ' "${LABEL[$y]}"; done)| tmx / vader | tmx udp / tcp |"
    echo "|---$(for y in "${SYSTEMS[@]}"; do printf '|---'; done)|---|---|"
    for s in $SIZES; do
        echo "| $(human "$s") $(for y in "${SYSTEMS[@]}"; do printf '| %s ' "$(fmt mbs "$(med "$y" bw "$s")")"; done)| $(rratio tmx vader bw "$s") | $(rratio tmxudp tcp bw "$s") |"
    done
    echo
    echo "![latency and bandwidth vs size](openmpi.png)"
    echo
    echo "## Every configuration, every size: median over rounds (min-max; each round)"
    echo
    echo "Latency columns are one way (round trip / 2) in us: the mean over the timed round trips, the"
    echo "median and the 99th percentile of the same round trips. Bandwidth in MB/s."
    for y in "${SYSTEMS[@]}"; do
        echo
        echo "### ${LABEL[$y]}"
        echo
        echo "| size | latency mean | latency median | latency p99 | bandwidth |"
        echo "|---|---|---|---|---|"
        for s in $SIZES; do
            echo "| $(human "$s") | $(cell "$y" lat "$s" us) | $(cell "$y" latmed "$s" us) | $(cell "$y" latp99 "$s" us) | $(cell "$y" bw "$s" mbs) |"
        done
        echo "| rate 8 B | | | | $(cell "$y" rate 8 rate) msg/s |"
    done
    echo
    echo "## How each figure is measured (bench/mpi/osu_p2p.c)"
    echo
    echo "- **Latency**: MPI_Send / MPI_Recv ping-pong between rank 0 and rank 1, one way = round trip / 2."
    echo "  Rank 0 reads CLOCK_MONOTONIC once per round trip: the mean is the whole timed span / (2 n), the"
    echo "  median and 99th percentile (nearest rank) come from the n round trips (the clock read, about"
    echo "  20 ns, is inside every one). n = min(10000, 2^28 / (size + 1024))$([ "$DIV" != 1 ] && echo " / $DIV"), at least 20; n/10 + 1"
    echo "  warm-up round trips first (osu_latency: 10000 round trips up to 8 KiB, 1000 above)."
    echo "- **Bandwidth**: rank 0 posts $WINDOW MPI_Isend, rank 1 $WINDOW MPI_Irecv (into one buffer, as osu_bw),"
    echo "  both MPI_Waitall, then rank 1 sends a 4-byte ack; W windows timed on rank 0 after W/10 + 1"
    echo "  warm-up windows. W = min(200, 2^30 / ((size + 1024) x $WINDOW))$([ "$DIV" != 1 ] && echo " / $DIV"), at least 2 (about 1 GiB per size)."
    echo "- **Message rate**: the same loop at 8 B with 10 x W windows, in messages per second."
    echo "- **Check**: after each size, one more round trip of a stamped payload that rank 0 compares; a"
    echo "  mismatch aborts the job. Buffers are allocated once for the largest size (2 MiB-aligned with"
    echo "  MADV_HUGEPAGE from 1 MiB up, as tmx-perf does), so every configuration sees the same memory."
    echo "- **Caches**: one send and one receive buffer serve every message (as in osu_bw), so up to about"
    echo "  1 MiB both stay in the caches and bandwidth there can pass memcpy's; from a few MiB on, memory"
    echo "  bandwidth rules (the calibration below has memcpy at 1 MiB and 16 MiB)."
    echo "- **One job per configuration and round**: all sizes of all three tests, in order, each after an"
    echo "  MPI_Barrier; each job bounded by mpirun --timeout $OMB_TO."
    echo "- **Order**: each round runs every configuration once, in an order that rotates from round to"
    echo "  round, Open MPI over tmx, ob1 + vader and pml ucx back to back (their order rotating too); the"
    echo "  tables give the median over rounds, and every ratio between configurations is the median of the"
    echo "  rounds' ratios: this machine's speed changes for minutes at a time, so a ratio of medians could"
    echo "  compare one configuration's fast rounds with another's slow ones. Before each step the script idles 0.5 s to read"
    echo "  how busy other processes keep cores 0 and 1 (the machine is shared), waiting for them to quieten"
    echo "  as described below."
    echo
    echo "## Calibration: memcpy on core 0 at the start of each round (GB/s, best of 3)"
    echo
    echo "Same program, same sizes, every round: the spread of these figures is how much the machine"
    echo "itself moved during the run. raw/openmpi/r<round>_calibration.txt also has the load average and"
    echo "the busiest processes at that moment."
    echo
    calibration_tables "calibration ${SYSTEMS[*]} tmxperf pairs"
    echo
    echo "## Exact commands (round 1)"
    echo
    echo "Run from the repository root, as root (tmx-perf and tmxrun ran from copies of build/release/tools"
    echo "taken at the start). NS1 and NS2 stand for the two namespaces (the prefix"
    echo "carries the script's pid), NET for their /24, \`osu_p2p\` for bench/mpi/osu_p2p.c built with"
    echo "\`mpicc -O2 -Wall -Wextra\`, and HOSTFILE lists \`NS1 slots=1\` and \`NS2 slots=1\`. Every command,"
    echo "by round, is in \`raw/openmpi/commands.txt\`."
    echo
    echo '```'
    awk '$1 == "r1" { sub(/^r1  /, ""); print }' "$RAWNEW/commands.txt" | sed -e "s#$TMP/fabric#$PROV_DIR#g" -e "s#$TMP/bin/#build/release/tools/#g" \
        -e "s#$TMP/limits/##g" -e "s#$TMP/osu_p2p#osu_p2p#g" -e "s#$TMP/hostfile#HOSTFILE#g" -e "s#$ROOT/##g" \
        -e "s#$NS1#NS1#g" -e "s#$NS2#NS2#g" -e "s#$FAULT_NET#NET#g" -e 's/\\,/,/g' -e "s/tcp\\\\;ofi_rxm/'tcp;ofi_rxm'/g" -e 's/ *$//'
    echo '```'
    echo
    problems_section
    echo
    echo "Raw outputs: \`raw/openmpi/\` (r<round>_<configuration>.txt with each job's whole output, hosts.txt"
    echo "with the test hosts, the provider's checksum and the UCX and libfabric versions, commands.txt,"
    echo "data.tsv with every figure, stats.tsv with the medians, plot.gp$([ -z "$PROV_NOTE" ] || echo ", build.log")."
} >"$MD"

# ----------------------------------------------------------------- publish
# raw/ speaks of the repository and of names the report explains, not of
# this machine's folders
for f in "$RAWNEW"/*; do
    case "$f" in *.png) continue ;; esac
    sed -i -e "s#$TMP/fabric#$PROV_DIR#g" -e "s#$TMP/bin/#build/release/tools/#g" -e "s#$TMP/osu_p2p#osu_p2p#g" -e "s#$TMP/limits/##g" \
        -e "s#$TMP/hostfile#HOSTFILE#g" -e "s#$TMP/#\$TMP/#g" -e "s#$ROOT/##g" "$f"
done
bench_publish
