#!/usr/bin/env bash
# bench/scale.sh - what a process and a host hold in an all-to-all, against
# the number of hosts and of ranks per host, for tmx and for Open MPI's
# ob1 + btl tcp.
#
# One all-to-all, 8 B then 64 KiB from every rank to every other at once,
# payloads checked, on 2, 4 and 8 test hosts (network namespaces made by
# tests/fault/hosts.sh) with 1, 4, 8 and 16 ranks each:
#   tmx   tmxrun --hosts ... mp_test scale (TMX_TRANSPORTS=self,shm,udp)
#   ompi  mpirun --mca pml ob1 --mca btl self,vader,tcp bench/mpi/alltoall.c
# Every rank prints its sockets, descriptors, peak RSS and malloc'd bytes
# (tests/mp/mp_proc.h). Writes results/scale.md and results/raw/scale/.
# Needs root. Usage: bench/scale.sh [-q] [--no-build] [--no-ompi] [-o DIR]
set -euo pipefail

usage() {
    cat <<'EOF'
usage: bench/scale.sh [-q] [--hosts "2 4 8"] [--ppn "1 4 8 16"] [--no-ompi] [--no-build] [--glibc-cache] [-o DIR]
  -q          quick: hosts 2 and 8, 4 and 16 ranks per host, Open MPI only up to
              32 ranks; writes to results/quick/ unless -o is given
  --hosts L   the numbers of hosts (default "2 4 8")
  --ppn L     the numbers of ranks per host (default "1 4 8 16")
  --no-ompi   tmx only
  --no-build  use build/release as it is
  --glibc-cache  keep glibc's per-thread cache of freed blocks (by default every
              rank runs with GLIBC_TUNABLES=glibc.malloc.tcache_count=0: the
              cache's blocks count as in use, and are no library's)
  -o DIR      output folder (default bench/results)
Needs root: it makes network namespaces and a bridge, and removes them on exit.
EOF
}

BENCH=scale
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
HOSTS_L="2 4 8" PPN_L="1 4 8 16" QUICK=0 OMPI=1 BUILD=1 OUT="" OMPI_MAX=4096 TCACHE=0
while [ $# -gt 0 ]; do
    case "$1" in
    -q | --quick) QUICK=1 HOSTS_L="2 8" PPN_L="4 16" OMPI_MAX=32; shift ;;
    --hosts) HOSTS_L=$2; shift 2 ;;
    --ppn) PPN_L=$2; shift 2 ;;
    --no-ompi) OMPI=0; shift ;;
    --no-build) BUILD=0; shift ;;
    --glibc-cache) TCACHE=1; shift ;;
    -o) OUT=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "scale.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "scale.sh: needs root (network namespaces)" >&2; exit 1; }
[ -n "$OUT" ] || { [ "$QUICK" = 1 ] && OUT=$HERE/results/quick || OUT=$HERE/results; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tmx-scale-bench.XXXXXX")
RAWNEW=$OUT/raw/.scale.new.$$
mkdir -p "$RAWNEW"
HOSTS_UP=0
JOB=""
cleanup() {
    [ -z "$JOB" ] || kill -9 "$JOB" 2>/dev/null || true
    [ "$HOSTS_UP" = 0 ] || fault_hosts_down
    rm -rf "$TMP" "$RAWNEW"
}
trap cleanup EXIT
trap 'echo "scale.sh: interrupted" >&2; exit 130' INT TERM HUP
TMX_GIT="$(cd "$ROOT" && git rev-parse --short HEAD) $(cd "$ROOT" && git status --porcelain --untracked-files=no -- . ':(exclude)bench/results' | wc -l)"

# -------------------------------------------------------------------- build
# The run uses copies taken now, so that a rebuild halfway through cannot
# mix two versions into one report.
if [ "$BUILD" = 1 ]; then
    log "building tmx (release)"
    (cd "$ROOT" && cmake --preset release >/dev/null && cmake --build build/release -j2 --target tmxrun mp_test) \
        >"$TMP/build.log" 2>&1 || { tail -30 "$TMP/build.log" >&2; exit 1; }
fi
cp "$ROOT/build/release/tools/tmxrun" "$ROOT/build/release/tests/mp_test" "$TMP/"
TMXRUN=$TMP/tmxrun MP_TEST=$TMP/mp_test
if [ "$OMPI" = 1 ]; then
    command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
        { echo "scale.sh: mpicc and mpirun wanted (apt-get install openmpi-bin libopenmpi-dev), or --no-ompi" >&2; exit 1; }
    mpicc -O2 -Wall -Wextra -I "$ROOT/tests/mp" -o "$TMP/alltoall" "$HERE/mpi/alltoall.c"
fi

# ------------------------------------------------------------- test hosts
MAXH=$(echo $HOSTS_L | tr ' ' '\n' | sort -n | tail -1)
FAULT_PREFIX="tmxsc$$"
# shellcheck source=../tests/fault/hosts.sh
. "$ROOT/tests/fault/hosts.sh" || exit 1
HOSTS_UP=1
fault_hosts_up "$MAXH" || exit 1
IFS=, read -r -a HOSTS <<<"$FAULT_HOSTS"
first_hosts() { local IFS=,; echo "${HOSTS[*]:0:$1}"; }

# ------------------------------------------------------------------- jobs
T_TMX=240 T_OMPI=600
export TMX_TRANSPORTS=self,shm,udp
TMX_CMD=("$TMXRUN" --agent 'ip netns exec {host}' --kvs-addr "$FAULT_KVS" --timeout "$T_TMX")
OMPI_CMD=(mpirun --allow-run-as-root --map-by node --bind-to none --timeout "$T_OMPI"
    --mca plm_rsh_agent "$ROOT/tests/mpi/netns_agent.sh" --mca plm_rsh_no_tree_spawn 1
    --mca oob_tcp_if_include "$FAULT_NET.0/24" --mca pml ob1 --mca btl self,vader,tcp
    --mca btl_tcp_if_include "$FAULT_NET.0/24" --mca mpi_yield_when_idle 1)
# glibc keeps up to 7 freed blocks of each size up to 1 KiB per thread, and
# mallinfo2() counts them as in use: whatever a library frees last (tmx: a
# peer's reliability state once its exchange is over, the arrays a growing
# map leaves) would show in the heap as held. Both libraries run without
# that cache unless --glibc-cache.
if [ "$TCACHE" = 0 ]; then
    export GLIBC_TUNABLES=glibc.malloc.tcache_count=0
    OMPI_CMD+=(-x GLIBC_TUNABLES)
fi
LINES=$TMP/lines.txt
: >"$LINES"
: >"$TMP/jobs.tsv"
: >"$TMP/failures.txt"

# Waits until no process is left in the hosts (up to 10 s), then kills
# what is; says so in the failures.
hosts_empty() { # JOBNAME
    local h left i
    for i in $(seq 100); do
        left=""
        for h in "${HOSTS[@]}"; do left="$left$(ip netns pids "$h" 2>/dev/null | tr '\n' ' ')"; done
        [ -n "$left" ] || return 0
        sleep 0.1
    done
    echo "$1: processes left in the hosts 10 s after the job ($left), killed" >>"$TMP/failures.txt"
    echo "$left" | xargs -r kill -9 2>/dev/null || true
}

job() { # LIB H PPN
    local lib=$1 h=$2 ppn=$3 n=$(($2 * $3)) name=$1_$2x$3 f t0 t rc ok got x b0 b1
    f=$RAWNEW/$name.txt
    if [ "$lib" = tmx ]; then
        set -- "${TMX_CMD[@]}" --hosts "$(first_hosts "$h")" -n "$n" -- "$MP_TEST" scale
    else
        first_hosts "$h" | tr , '\n' | sed "s/\$/ slots=$ppn/" >"$TMP/hostfile"
        cp "$TMP/hostfile" "$RAWNEW/hostfile_$name"
        set -- "${OMPI_CMD[@]}" --hostfile "$TMP/hostfile" -n "$n" "$TMP/alltoall"
    fi
    printf '%s: %s\n' "$name" "$(printf '%q ' "$@" | sed -e "s#$TMP/#BIN/#g" -e "s#$ROOT/##g")" >>"$RAWNEW/commands.txt"
    read -r b0 b1 <<<"$(foreign_busy 0.5)"
    log "$name: $n ranks (others keep the cores $b0 % / $b1 % busy)"
    t0=$(date +%s.%N)
    timeout -k 5 $((T_OMPI + 30)) "$@" >"$f" 2>&1 &
    JOB=$!
    rc=0
    wait "$JOB" || rc=$?
    JOB=""
    t=$(echo "$(date +%s.%N) - $t0" | bc)
    hosts_empty "$name"
    got=$(grep -c "^scale lib=$lib " "$f" || true)
    ok=1
    [ "$rc" = 0 ] || ok=0
    [ "$got" = "$n" ] || ok=0
    if [ "$lib" = tmx ]; then grep -q "^mp_test scale: ok, $n ranks" "$f" || ok=0; fi
    if [ "$lib" = ompi ]; then grep -q "^alltoall: ok, $n ranks" "$f" || ok=0; fi
    [ "$ok" = 1 ] || echo "$name: exit $rc, $got of $n ranks reported (raw/scale/$name.txt)" >>"$TMP/failures.txt"
    x=$(sed -n 's/^scale: .*, \([0-9.]*\) s$/\1/p' "$f")
    printf '%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\n' "$lib" "$h" "$ppn" "$n" "$t" "$([ $ok = 1 ] && echo ok || echo FAILED)" \
        "${x:-n/a}" "$b0 / $b1" >>"$TMP/jobs.tsv"
    log "$name: $([ $ok = 1 ] && echo ok || echo "FAILED (exit $rc, $got of $n lines)"), $(printf '%.1f' "$t") s"
    grep "^scale lib=$lib " "$f" | sed "s/^scale /scale hosts=$h ppn=$ppn /" >>"$LINES" || true
}

START=$(date '+%F %T %Z')
T0=$(date +%s)
for h in $HOSTS_L; do
    for ppn in $PPN_L; do
        [ $((h * ppn)) -ge 2 ] || continue
        job tmx "$h" "$ppn"
        if [ "$OMPI" = 1 ] && [ $((h * ppn)) -le "$OMPI_MAX" ]; then job ompi "$h" "$ppn"; fi
    done
done
END=$(date '+%F %T %Z')
ELAPSED=$(($(date +%s) - T0))
cp "$LINES" "$RAWNEW/lines.txt"
cp "$TMP/jobs.tsv" "$RAWNEW/jobs.tsv"

# --------------------------------------------------------------- statistics
# pstat LIB H PPN KEY med|max|min: over the job's processes.
pstat() {
    awk -v lib="$1" -v h="$2" -v ppn="$3" -v key="$4" -v what="$5" '
        { delete v; for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
          if (v["lib"] == lib && v["hosts"] == h && v["ppn"] == ppn) x[++n] = v[key] + 0 }
        END {
            if (!n) { print ""; exit }
            for (i = 2; i <= n; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
            if (what == "min") print x[1]; else if (what == "max") print x[n]
            else print (n % 2) ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }' "$LINES"
}
# host_stat LIB H PPN KEY med|max: KEY summed over each host's processes,
# then over the hosts.
host_stat() {
    awk -v lib="$1" -v h="$2" -v ppn="$3" -v key="$4" -v what="$5" '
        { delete v; for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
          if (v["lib"] == lib && v["hosts"] == h && v["ppn"] == ppn) s[v["netns"]] += v[key] }
        END { for (k in s) x[++n] = s[k]; if (!n) { print ""; exit }
            for (i = 2; i <= n; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
            if (what == "max") print x[n]; else print (n % 2) ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }' "$LINES"
}
cell() { # LIB H PPN KEY [SCALE]: "median / max", divided by SCALE
    local m x d=${5:-1}
    m=$(pstat "$1" "$2" "$3" "$4" med) x=$(pstat "$1" "$2" "$3" "$4" max)
    [ -n "$m" ] || { echo "n/a"; return; }
    awk -v m="$m" -v x="$x" -v d="$d" 'BEGIN { if (m / d == x / d) printf "%.0f", m / d; else printf "%.0f / %.0f", m / d, x / d }'
}
hcell() { # LIB H PPN KEY
    local m x
    m=$(host_stat "$1" "$2" "$3" "$4" med) x=$(host_stat "$1" "$2" "$3" "$4" max)
    [ -n "$m" ] || { echo "n/a"; return; }
    [ "$m" = "$x" ] && echo "$m" || echo "$m / $x"
}
jobcol() { awk -F'\t' -v l="$1" -v h="$2" -v p="$3" -v c="$4" '$1 == l && $2 == h && $3 == p { print $c }' "$TMP/jobs.tsv"; }

# ------------------------------------------------------------------- report
MD=$TMP/scale.md
sockkey() { [ "$1" = tmx ] && echo udp || echo tcp; }
table() { # LIB
    local lib=$1 h ppn k
    k=$(sockkey "$lib")
    echo "| hosts x ranks | ranks | job | others' use of the cores before (%) | job time (s) | exchange (s) | ${k^^} sockets / process | all sockets / process | fds / process | peak RSS / process (KiB) | heap after (KiB) | heap settled (KiB) | heap per remote process after 8 B (B) | ${k^^} sockets / host (ranks' own) | ${k^^} sockets / host (namespace) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for h in $HOSTS_L; do
        for ppn in $PPN_L; do
            [ -n "$(jobcol "$lib" "$h" "$ppn" 1)" ] || continue
            echo "| $h x $ppn | $((h * ppn)) | $(jobcol "$lib" "$h" "$ppn" 6) | $(jobcol "$lib" "$h" "$ppn" 8) | $(jobcol "$lib" "$h" "$ppn" 5) | $(jobcol "$lib" "$h" "$ppn" 7) | $(cell "$lib" "$h" "$ppn" "$k") | $(cell "$lib" "$h" "$ppn" sockets) | $(cell "$lib" "$h" "$ppn" fds) | $(cell "$lib" "$h" "$ppn" hwm_kb) | $(cell "$lib" "$h" "$ppn" heap_large 1024) | $(cell "$lib" "$h" "$ppn" heap_settled 1024) | $(cell "$lib" "$h" "$ppn" peer_bytes) | $(hcell "$lib" "$h" "$ppn" "$k") | $(cell "$lib" "$h" "$ppn" "ns_$k") |"
        done
    done
}
# The derived figures at 8 hosts from 4 to 16 ranks per host: the change
# in the median process's sockets, and in its memory per added remote
# process (8 x 12 = 96 of them).
derived() { # LIB
    local lib=$1 k a b added
    k=$(sockkey "$lib")
    added=$((8 * 16 - 8 * 4))
    a=$(pstat "$lib" 8 4 "$k" med) b=$(pstat "$lib" 8 16 "$k" med)
    [ -n "$a" ] && [ -n "$b" ] || { echo "| ${LIBNAME[$lib]} | n/a (no 8 x 4 or 8 x 16 figures) | | | |"; return; }
    printf '| %s | %s -> %s: %s |' "${LIBNAME[$lib]}" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%+g", b - a }')"
    for key in heap_large heap_settled hwm_kb rss_kb; do
        a=$(pstat "$lib" 8 4 "$key" med) b=$(pstat "$lib" 8 16 "$key" med)
        awk -v a="$a" -v b="$b" -v u="$([[ "$key" = heap_* ]] && echo 1 || echo 1024)" -v n="$added" \
            'BEGIN { printf " %.0f B |", (b - a) * u / n }'
    done
    echo
}
declare -A LIBNAME=([tmx]="tmx (udp, one port per node)" [ompi]="Open MPI ob1 + btl tcp")
verdict_tmx() {
    local ds dm
    ds=$(awk -v a="$(pstat tmx 8 4 udp med)" -v b="$(pstat tmx 8 16 udp med)" 'BEGIN { printf "%g", b - a }')
    dm=$(awk -v a="$(pstat tmx 8 4 heap_settled med)" -v b="$(pstat tmx 8 16 heap_settled med)" 'BEGIN { printf "%.0f", (b - a) / 96 }')
    dl=$(awk -v a="$(pstat tmx 8 4 heap_large med)" -v b="$(pstat tmx 8 16 heap_large med)" 'BEGIN { printf "%.0f", (b - a) / 96 }')
    echo "Target: with 8 hosts, from 4 to 16 ranks per host, sockets per process change by 0 and"
    echo "memory per process by at most 64 B per added remote process. Measured for tmx: $ds sockets,"
    echo "$dm B of heap per added remote process once settled ($dl B right after the exchange):"
    if [ "$ds" != 0 ]; then
        echo "**not met**"
    elif [ "$dm" -lt 0 ]; then
        # a pool chunk (14 to 92 KiB) kept by one median process and not
        # by the other weighs up to about 1 KB per added process: more
        # than the state each adds
        echo "**not conclusive**: the settled heap shrank, so the chunks the library's pools kept or gave"
        echo "back in the two median processes weigh more here than what each remote process adds"
    else
        echo "**$([ "$dm" -le 64 ] && echo met || echo "not met")**"
    fi
    echo "(the heap is what the library allocates; RSS and peak RSS above also count the shared-memory"
    echo "segments a process maps, which grow with the ranks of its own host)."
}
{
    echo "# Scale: what a process and a host hold in an all-to-all"
    echo
    [ "$QUICK" = 1 ] && echo "> **QUICK RUN** (\`-q\`): a subset of the matrix, a smoke test of the script." && echo
    echo "Produced by \`bench/scale.sh$([ "$QUICK" = 1 ] && echo ' -q')$([ "$OMPI" = 0 ] && echo ' --no-ompi')\` in one run: $START to $END ($((ELAPSED / 60)) min $((ELAPSED % 60)) s)."
    echo
    echo "One all-to-all: every rank sends 8 B to every other rank at once (all receives posted, then all"
    echo "sends), then 64 KiB the same way, and checks every byte it receives. Ranks are spread round-robin"
    echo "over the hosts (rank r on host r mod H), so each host holds ranks-per-host of them; the"
    echo "ranks of one host talk through shared memory (tmx's shm, Open MPI's vader), those of different"
    echo "hosts through UDP (tmx) or TCP (Open MPI's btl tcp). One job per configuration."
    echo
    echo "## Machine and software"
    echo
    echo "| | |"
    echo "|---|---|"
    machine_rows
    [ "$OMPI" = 0 ] || echo "| Open MPI | openmpi-bin $(pkgv openmpi-bin), libopenmpi3 $(pkgv libopenmpi3); $(mpicc --version | head -1) |"
    echo "| test hosts | $MAXH network namespaces, each with eth0, one end of a veth pair into a bridge in the root namespace (tests/fault/hosts.sh); a job on H hosts uses the first H |"
    echo
    echo "## What is measured"
    echo
    echo "Each rank, at the end of the exchange, prints one line (\`tests/mp/mp_proc.h\`, shared by both programs):"
    echo
    echo "- **sockets by protocol**: the process's descriptors that are sockets (\`/proc/self/fd/N\` ->"
    echo "  \`socket:[INODE]\`), looked up by inode in its network namespace's \`/proc/self/net/udp\`, \`udp6\`,"
    echo "  \`tcp\`, \`tcp6\`; read after a barrier that follows the exchange and before one that precedes"
    echo "  closing, so every rank still holds all its sockets. **all sockets** counts every socket"
    echo "  descriptor (also Unix ones: tmx's link to tmxrun, Open MPI's to its daemon)."
    echo "- **sockets / host (ranks' own)**: the sum of that count over the host's ranks; **(namespace)**:"
    echo "  the number of rows in the namespace's tables at that moment, as one rank saw it (whoever holds"
    echo "  them: for Open MPI, also its daemon's connections and sockets of other ranks in TIME_WAIT)."
    echo "- **fds**: open descriptors (\`/proc/self/fd\`)."
    echo "- **peak RSS**: \`VmHWM\` of \`/proc/self/status\` at the end."
    if [ "$TCACHE" = 0 ]; then
        echo "- **glibc's thread cache is off** in every rank of both libraries (\`GLIBC_TUNABLES=glibc.malloc.tcache_count=0\`):"
        echo "  glibc keeps up to 7 freed blocks of each size up to 1 KiB per thread and \`mallinfo2()\` counts"
        echo "  them as in use, so blocks a library freed last (tmx: flows of finished exchanges, the arrays its"
        echo "  maps outgrew) would show as held, more of them in larger jobs. \`--glibc-cache\` keeps it."
    else
        echo "- **glibc's thread cache is on** (\`--glibc-cache\`): the heap also counts the freed blocks it keeps."
    fi
    echo "- **heap**: bytes malloc'd and in use, \`mallinfo2()\` \`uordblks + hblkhd\` (glibc: all arenas, and"
    echo "  chunks served by mmap), and for tmx also what it maps privately for itself (its request and"
    echo "  message pools, \`tmx_context_memory\`), read with the program's own buffers unmapped (they are mapped outside malloc, which would keep them): before any message (tmx:"
    echo "  after \`tmx_context_create\` and a barrier through tmxrun, which sends nothing between ranks;"
    echo "  Open MPI: right after \`MPI_Init\`), after the 8 B round, after the 64 KiB round (**heap after**),"
    echo "  and **heap settled**: 0.2 s later, after a barrier, the program having called its library all"
    echo "  that time (\`tmx_wait\`; \`MPI_Iprobe\`), so that ACKs it delays are sent and what the"
    echo "  exchange left under way is over (tmx frees a remote process's reliability state, its flow, once"
    echo "  nothing is in flight, owed or pending: \`docs/udp.md\`; its request and message pools go back to one chunk once the last request or message is gone). Pools that grew with the exchange"
    echo "  (segment buffers; Open MPI's free lists) are otherwise still counted in both. **heap per remote process after 8 B** is (after 8 B - before) / (ranks - 1): the"
    echo "  state a first message to every peer leaves behind (tmx creates peer state on first use; Open"
    echo "  MPI's ob1 and btl tcp connect on first use too). Shared-memory segments are mapped, not malloc'd:"
    echo "  they show in RSS, not in the heap."
    echo
    echo "Cells are **median / max** over the job's processes (or hosts), one figure when both are equal."
    echo "**job time** is the launcher's whole run (start-up, the exchange, shutdown), **exchange** what rank 0"
    echo "measured from before the 8 B round to after the barrier that follows the 64 KiB one. The 2 cores"
    echo "are shared by all ranks of all hosts: every figure of time comes from an oversubscribed machine,"
    echo "which other users share too (**others' use**: how busy other processes kept cores 0 / 1 during"
    echo "0.5 s before the job, from \`/proc/stat\`). Sockets and memory do not depend on the load."
    echo
    echo "## tmx"
    echo
    echo "\`TMX_TRANSPORTS=self,shm,udp tmxrun --hosts H1,...,Hh --agent 'ip netns exec {host}' --kvs-addr NET.254 --timeout $T_TMX -n N -- mp_test scale\`"
    echo "(default settings otherwise: one UDP port per node, \`TMX_UDP_SHARED_PORT=auto\`, and a connected send socket per remote node)."
    echo
    table tmx
    echo
    if [ "$OMPI" = 1 ]; then
        echo "## Open MPI, ob1 + btl tcp"
        echo
        echo "\`mpirun --allow-run-as-root --hostfile HOSTFILE (H1..Hh slots=PPN) -n N --map-by node --bind-to none --mca plm_rsh_agent tests/mpi/netns_agent.sh --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include NET.0/24 --mca pml ob1 --mca btl self,vader,tcp --mca btl_tcp_if_include NET.0/24 --mca mpi_yield_when_idle 1 alltoall\`"
        echo "(\`bench/mpi/alltoall.c\`, \`mpicc -O2 -I tests/mp\`$([ "$OMPI_MAX" -lt 4096 ] && echo "; jobs of up to $OMPI_MAX ranks"))."
        echo
        table ompi
        echo
    fi
    echo "## Going from 4 to 16 ranks per host on 8 hosts"
    echo
    echo "Each process gains 8 x 12 = 96 remote processes (31 -> 127). Change in the median process:"
    echo
    echo "| | sockets / process (UDP for tmx, TCP for Open MPI) | heap per added remote process, after | heap per added remote process, settled | peak RSS per added remote process | RSS per added remote process |"
    echo "|---|---|---|---|---|---|"
    derived tmx
    [ "$OMPI" = 0 ] || derived ompi
    echo
    if [ -n "$(pstat tmx 8 4 udp med)" ] && [ -n "$(pstat tmx 8 16 udp med)" ]; then verdict_tmx; echo; fi
    echo "## Problems seen in this run"
    echo
    if [ -s "$TMP/failures.txt" ]; then sed 's/^/- /' "$TMP/failures.txt"; else echo "None: every job exited 0 and every rank reported."; fi
    echo
    echo "Raw outputs: \`raw/scale/\` (each job's output, \`commands.txt\`, \`jobs.tsv\`: library, hosts, ranks per"
    echo "host, ranks, job seconds, verdict, exchange seconds, others' use; \`lines.txt\`: every rank's line)."
} >"$MD"
sed -i "s#$TMP/##g" "$RAWNEW"/*.txt
cp "$MD" "$OUT/scale.md"
rm -rf "$OUT/raw/scale"
mv "$RAWNEW" "$OUT/raw/scale"
log "done in $((ELAPSED / 60)) min $((ELAPSED % 60)) s: $OUT/scale.md, $OUT/raw/scale/"
[ ! -s "$TMP/failures.txt" ]
