#!/usr/bin/env bash
# bench/overlap.sh - overlap of communication with computation, and what
# the offload engine (TMX_OFFLOAD, docs/offload.md) costs small messages.
#
# Overlap: two ranks on cores 0 and 1 exchange a message each way; alone
# that takes x on rank 0 (median); then rank 0 computes between posting
# and waiting, without calling the library, work that takes x on a core of
# its own (a fixed amount, calibrated: a library thread that takes the
# computing core lengthens it rather than hiding in it), and the exchange takes
# t; overlap = 1 - (t - x) / x (100 %: the transfer hid entirely behind the
# computation). The same with one message, which rank 0 receives (recv) or
# sends (send) while it computes. Sizes 64 KiB to 16 MiB, in interleaved
# rounds, over
#   tmx            tmx-perf -t overlap, shm, TMX_OFFLOAD=0
#   tmx+engine     the same with TMX_OFFLOAD=1
#   tmx+offer      the same with TMX_OFFLOAD=1 TMX_OFFLOAD_OFFER=1 (receives
#                  offered to their senders, docs/offload.md)
#   ompi+tmx       bench/mpi/overlap.c, Open MPI over the provider, TMX_OFFLOAD=1
#   vader          bench/mpi/overlap.c, pml ob1 + btl self,vader
#   ucx            bench/mpi/overlap.c, pml ucx (when ompi_info lists it)
# Cost: tmx-perf 8-byte latency and message rate, TMX_OFFLOAD=0 against 1,
# interleaved.
# Writes results/overlap.md and results/raw/overlap/. Usage: bench/overlap.sh [-r ROUNDS] [--quick]
set -euo pipefail

usage() {
    cat <<'EOF'
usage: bench/overlap.sh [-r ROUNDS] [--quick] [--no-install] [--no-build] [-o DIR]
  -r ROUNDS     interleaved rounds (default 3)
  --quick       1 round, fewer iterations (writes results/quick/ unless -o)
  --no-install  do not apt-get install missing tools
  --no-build    use build/release as it is
  -o DIR        output folder (default bench/results)
EOF
}

BENCH=overlap
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
bench_args "$@"
bench_init
bench_need "mpirun mpicc ompi_info taskset" openmpi-bin libopenmpi-dev util-linux
bench_build
bench_staging

SIZES="65536,262144,1048576,4194304,16777216"
ITERS=100
LAT_N=200000
RATE_N=2000000
if [ "$QUICK" = 1 ]; then ITERS=10 LAT_N=20000 RATE_N=200000; fi
mpicc -O2 -Wall -Wextra -o "$TMP/overlap" "$HERE/mpi/overlap.c"
PROV=$ROOT/build/release/fabric
TMX_GIT="$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo "?")"
SYSTEMS="tmx tmx+engine tmx+offer ompi+tmx vader"
ompi_info 2>/dev/null | grep -q "MCA pml: ucx" && SYSTEMS="$SYSTEMS ucx"
MPI=(taskset -c 0,1 mpirun --allow-run-as-root --bind-to none -n 2)

MODES="exchange recv send"

one() { # SYSTEM MODE
    local s=$1 m=$2 f="$RAWNEW/r${ROUND}_${1}_$2.txt" cmd t=overlap
    [ "$m" = exchange ] || t=overlap-$m
    case $s in
    tmx) cmd="env TMX_OFFLOAD=0 taskset -c 0,1 $TMXRUN -n 2 $PERF -t $t -s $SIZES -n $ITERS --csv" ;;
    tmx+engine) cmd="env TMX_OFFLOAD=1 taskset -c 0,1 $TMXRUN -n 2 $PERF -t $t -s $SIZES -n $ITERS --csv" ;;
    tmx+offer) cmd="env TMX_OFFLOAD=1 TMX_OFFLOAD_OFFER=1 taskset -c 0,1 $TMXRUN -n 2 $PERF -t $t -s $SIZES -n $ITERS --csv" ;;
    ompi+tmx) cmd="${MPI[*]} --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tmx -x FI_PROVIDER_PATH=$PROV -x TMX_OFFLOAD=1 $TMP/overlap -s $SIZES -n $ITERS -m $m" ;;
    vader) cmd="${MPI[*]} --mca pml ob1 --mca btl self,vader $TMP/overlap -s $SIZES -n $ITERS -m $m" ;;
    ucx) cmd="${MPI[*]} --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any $TMP/overlap -s $SIZES -n $ITERS -m $m" ;;
    esac
    printf 'r%s  %s\n' "$ROUND" "$cmd" >>"$RAWNEW/commands.txt"
    # shellcheck disable=SC2086
    if ! timeout "$TO" $cmd >"$f" 2>&1; then
        echo "r$ROUND $s $m: failed (raw/overlap/$(basename "$f"))" >>"$TMP/failures.txt"
        return 0
    fi
    case $s in
    tmx | tmx+engine | tmx+offer) # test,transport,size,iterations,value,unit rows
        awk -F, -v s="$s" -v r="$ROUND" -v m="$m" '$1 ~ /^overlap/ { printf "%s\t%s\toverlap:%s\t%s\t%s\n", r, s, m, $3, $5 }
            $1 == "xfer" { printf "%s\t%s\txfer:%s\t%s\t%s\n", r, s, m, $3, $5 }' "$f" >>"$DATA" ;;
    *) # overlap,SIZE,ITERS,OVERLAP,X,T
        awk -F, -v s="$s" -v r="$ROUND" -v m="$m" '$1 == "overlap" { printf "%s\t%s\toverlap:%s\t%s\t%s\n", r, s, m, $2, $4
            printf "%s\t%s\txfer:%s\t%s\t%s\n", r, s, m, $2, $5 }' "$f" >>"$DATA" ;;
    esac
    log "r$ROUND $s $m done"
}

cost() { # OFFLOAD
    local f="$RAWNEW/r${ROUND}_cost_$1.txt"
    {
        env TMX_OFFLOAD="$1" taskset -c 0,1 "$TMXRUN" -n 2 "$PERF" -t lat -s 8 -n "$LAT_N" --csv
        env TMX_OFFLOAD="$1" taskset -c 0,1 "$TMXRUN" -n 2 "$PERF" -t rate -s 8 -n "$RATE_N" --csv
    } >"$f" 2>&1 || { echo "r$ROUND cost $1: failed" >>"$TMP/failures.txt"; return 0; }
    awk -F, -v o="$1" -v r="$ROUND" '$1 ~ /^(lat|lat_p50|lat_p99|rate)$/ { printf "%s\toffload=%s\t%s\t8\t%s\n", r, o, $1, $5 }' "$f" >>"$DATA"
}

T_START=$(date +%s)
START_DATE=$(date -u '+%F %H:%M UTC')
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for ROUND in $(seq 1 "$ROUNDS"); do
    read -r -a sys <<<"$SYSTEMS"
    k=$(((ROUND - 1) % ${#sys[@]}))
    for m in $MODES; do
        for s in "${sys[@]:k}" "${sys[@]:0:k}"; do one "$s" "$m"; done
    done
    if [ $((ROUND % 2)) = 1 ]; then cost 0; cost 1; else cost 1; cost 0; fi
done
ELAPSED=$(($(date +%s) - T_START))
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
cp "$DATA" "$RAWNEW/data.tsv"

med() { # SYSTEM METRIC SIZE -> median over rounds
    awk -F'\t' -v s="$1" -v m="$2" -v z="$3" '$2 == s && $3 == m && $4 == z { v[c++] = $5 }
        END { if (c == 0) { print ""; exit }
              for (i = 0; i < c; i++) for (j = i + 1; j < c; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
              m = c % 2 ? v[(c - 1) / 2] : (v[c / 2 - 1] + v[c / 2]) / 2
              if (m >= 1000 || m <= -1000) printf "%.0f", m; else printf "%.4g", m }' "$DATA"
}
lst() { # SYSTEM METRIC SIZE -> every round's value
    awk -F'\t' -v s="$1" -v m="$2" -v z="$3" '$2 == s && $3 == m && $4 == z { l = l (l == "" ? "" : "/") $5 } END { print l }' "$DATA"
}
human() { awk -v b="$1" 'BEGIN { if (b >= 1048576) printf "%d MiB", b / 1048576; else printf "%d KiB", b / 1024 }'; }

table() { # METRIC WITH_ROUNDS: a row per size, a column per system
    printf '| size |'; for s in $SYSTEMS; do printf ' %s |' "$s"; done; echo
    printf '|---|'; for s in $SYSTEMS; do printf '%s' '---|'; done; echo
    for z in ${SIZES//,/ }; do
        printf '| %s |' "$(human "$z")"
        for s in $SYSTEMS; do
            if [ "$2" = 1 ]; then printf ' %s %% [%s] |' "$(med "$s" "$1" "$z")" "$(lst "$s" "$1" "$z")"
            else printf ' %s |' "$(med "$s" "$1" "$z")"; fi
        done
        echo
    done
}

MD=$TMP/overlap.md
{
    echo "# Overlap of communication with computation"
    echo
    echo "$START_DATE, $ROUNDS interleaved round(s), ${ELAPSED} s in all; tmx at $TMX_GIT."
    echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), both ranks on cores 0 and 1;"
    echo "load average $LOAD_START at the start, $LOAD_END at the end. Open MPI $(ompi_info 2>/dev/null | awk '/Open MPI:/ {print $3; exit}')."
    echo
    echo "Overlap = 1 - (t - x) / x, in percent: x is the transfer alone, measured on rank 0 (median of"
    echo "the iterations); t the same transfer while rank 0 computes, between posting and waiting, work"
    echo "that takes x on a core of its own (a fixed amount of work, calibrated alone, not a stretch of"
    echo "time: a library thread that takes the computing core lengthens it); rank 1 waits as usual."
    echo "Median over rounds [every round]. Only rank 0 computes: on two cores a copy needs a core that is"
    echo "not computing. Three patterns:"
    echo
    echo "- **recv**: rank 0 receives one message (rank 1 sends it) while it computes;"
    echo "- **send**: rank 0 sends one message (rank 1 receives it) while it computes;"
    echo "- **exchange**: both ranks send a message each way. While rank 0 computes, only rank 1's core"
    echo "  is free, so t holds the two copies one after the other where x had them at once, one core"
    echo "  each: whatever the library, overlap is bounded by how much x's two copies slowed each other"
    echo "  (memory bandwidth), not near 100 %."
    echo
    echo "tmx+engine runs the offload engine (TMX_OFFLOAD=1); tmx+offer also offers each receive to its"
    echo "sender as it is posted (TMX_OFFLOAD_OFFER=1), and whichever of the two is idle copies: the"
    echo "sender writes into the receive, or the receiver reads (docs/offload.md)."
    echo
    for m in $MODES; do
        echo "### $m"
        echo
        table "overlap:$m" 1
        echo
        echo "The transfer alone (x), microseconds, median:"
        echo
        table "xfer:$m" 0
        echo
    done
    echo "## What the engine costs small messages (tmx-perf, 8 B, shm)"
    echo
    echo "Each round runs both back to back; the ratio is the median of the rounds' ratios (1 over 0)."
    echo
    echo "| measure | TMX_OFFLOAD=0 | TMX_OFFLOAD=1 | 1 / 0 | every round (0; 1) |"
    echo "|---|---|---|---|---|"
    for m in lat lat_p50 lat_p99 rate; do
        a=$(med offload=0 "$m" 8) b=$(med offload=1 "$m" 8)
        r=$(awk -F'\t' -v m="$m" '$3 == m && $2 == "offload=0" { a[$1] = $5 } $3 == m && $2 == "offload=1" { b[$1] = $5 }
            END { for (k in a) if (k in b && a[k] > 0) v[c++] = b[k] / a[k]
                  if (c == 0) { print "n/a"; exit }
                  for (i = 0; i < c; i++) for (j = i + 1; j < c; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
                  printf "%.2f", c % 2 ? v[(c - 1) / 2] : (v[c / 2 - 1] + v[c / 2]) / 2 }' "$DATA")
        echo "| $m ($( [ "$m" = rate ] && echo msg/s || echo us )) | $a | $b | $r | $(lst offload=0 "$m" 8); $(lst offload=1 "$m" 8) |"
    done
    echo
    problems_section
    echo
    echo "Commands: raw/overlap/commands.txt; every output beside it."
} >"$MD"
bench_publish
