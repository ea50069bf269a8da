# bench/lib.sh - helpers shared by the side-by-side benchmarks (sourced by
# shm.sh, udp.sh and openmpi.sh; not run on its own).
#
# The script sets BENCH (its name: shm, udp, openmpi: used for its temporary folder,
# messages and raw/$BENCH/) and defines usage() before sourcing this file,
# then calls, in order:
#   bench_args "$@"            options common to every benchmark
#   bench_init                 paths, temporary folder, the exit trap
#   bench_need "CMDS" PKGS...  installs missing tools from Debian
#   bench_build                builds tmx (unless --no-build)
#   bench_staging              the folder the raw outputs are collected in
# and at the end bench_stats, the report helpers (st, med, fmt, row, ...)
# and bench_publish. A script that needs more cleaning up on exit defines
# bench_cleanup_extra() (called by the trap before the folders go).

# ----------------------------------------------------------------- options
# Sets ROUNDS QUICK INSTALL BUILD OUT QUIET_MAX from the command line.
bench_args() {
    ROUNDS=3 QUICK=0 INSTALL=1 BUILD=1 OUT="" QUIET_MAX=20
    while [ $# -gt 0 ]; do
        case "$1" in
        -r) [ $# -ge 2 ] || { usage >&2; exit 2; }; ROUNDS=$2; shift 2 ;;
        -r*) ROUNDS=${1#-r}; shift ;;
        --quick) QUICK=1; shift ;;
        --no-install) INSTALL=0; shift ;;
        --no-wait) QUIET_MAX=0; shift ;;
        --no-build) BUILD=0; shift ;;
        -o) [ $# -ge 2 ] || { usage >&2; exit 2; }; OUT=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$BENCH.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
        esac
    done
    case "$ROUNDS" in '' | *[!0-9]* | 0) echo "$BENCH.sh: -r wants a positive integer" >&2; exit 2 ;; esac
    [ "$QUICK" = 1 ] && ROUNDS=1
    return 0
}

# ------------------------------------------------------- paths and hygiene
# Sets HERE ROOT OUT BIN TMXRUN PERF TO TMP and the exit trap.
bench_init() {
    HERE=${HERE:-$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)}
    ROOT=$(dirname "$HERE")
    if [ -z "$OUT" ]; then
        if [ "$QUICK" = 1 ]; then OUT=$HERE/results/quick; else OUT=$HERE/results; fi
    fi
    mkdir -p "$OUT"
    OUT=$(cd "$OUT" && pwd)
    BIN=$ROOT/build/release/tools
    TMXRUN=$BIN/tmxrun
    PERF=$BIN/tmx-perf
    TO=180                                   # bound on any single measurement (s)
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/tmx-$BENCH-bench.XXXXXX")
    PIDS=" "
    trap bench_cleanup EXIT
    trap 'echo "$BENCH.sh: interrupted" >&2; exit 130' INT TERM HUP
}
bench_cleanup() {
    local p
    for p in $PIDS; do kill -TERM "$p" 2>/dev/null || true; done
    for p in $PIDS; do wait "$p" 2>/dev/null || true; done
    if declare -F bench_cleanup_extra >/dev/null; then bench_cleanup_extra || true; fi
    rm -rf "$TMP"
    rm -rf "${RAWNEW:-/nonexistent-$BENCH-bench}"
}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Runs "$@" in the background with stdout+stderr appended to $1, remembers
# its pid for the trap, and sets BG.
start_bg() {
    local file=$1; shift
    # the command as run, with this machine's folders named by role
    { printf '### %s\n' "$(printf '%q ' "$@" | sed -e "s#${TMP:-/nonexistent}/#TMP/#g" -e "s#${ROOT:-/nonexistent}/##g")"; } >>"$file"
    "$@" >>"$file" 2>&1 &
    BG=$!
    PIDS="$PIDS$BG "
}
# Waits for a pid started by start_bg; sets RC.
wait_bg() {
    RC=0
    wait "$1" || RC=$?
    PIDS=${PIDS/ $1 / }
}
# Runs "$@" to completion (in the background, so the trap can end it), output
# appended to $1; sets RC. Also logs the command to commands.txt.
run() {
    local file=$1; shift
    logcmd "$(printf '%q ' "$@")"
    start_bg "$file" "$@"
    wait_bg "$BG"
}
SWEEPING=0
logcmd() { printf 'r%s%s  %s\n' "$ROUND" "$([ "$SWEEPING" = 1 ] && echo s)" "$1" >>"$RAWNEW/commands.txt"; }
fail() { # SYSTEM WHAT RC FILE
    printf 'round %s: %s %s failed (exit %s; output in raw/%s/%s)\n' "$ROUND" "$1" "$2" "$3" "$BENCH" "$(basename "$4")" >>"$TMP/failures.txt"
    log "FAILED: $1 $2 (exit $3)"
}
# Waits until something listens on TCP port $1 in the network namespace of
# pid $2 (which must stay alive): /proc/PID/net/tcp is that namespace's table.
wait_listen() {
    local hex i
    hex=$(printf '%04X' "$1")
    for i in $(seq 200); do
        if awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
            "/proc/$2/net/tcp" "/proc/$2/net/tcp6" 2>/dev/null; then
            return 0
        fi
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}
PORT=14000
next_port() { PORT=$((PORT + 1)); [ $PORT -lt 14900 ] || PORT=14001; }

# ------------------------------------------------------------------ install
# bench_need "CMD ..." PACKAGE...: installs the packages from Debian when a
# command is missing (gnuplot-nox stands for gnuplot-nox or gnuplot), and
# fails if any is still missing. Also wants cores 0 and 1.
bench_need() {
    local cmds=$1 missing="" c SUDO="" pkgs=() p
    shift
    for c in $cmds; do command -v "$c" >/dev/null 2>&1 || missing="$missing $c"; done
    if [ -n "$missing" ]; then
        [ "$INSTALL" = 1 ] || { echo "$BENCH.sh: missing:$missing (and --no-install)" >&2; exit 1; }
        [ "$(id -u)" = 0 ] || SUDO=sudo
        log "installing from Debian (missing:$missing)"
        export DEBIAN_FRONTEND=noninteractive
        $SUDO apt-get update -qq
        for p in "$@"; do
            if [ "$p" = gnuplot-nox ] && ! apt-cache show gnuplot-nox >/dev/null 2>&1; then p=gnuplot; fi
            pkgs+=("$p")
        done
        $SUDO apt-get install -y -qq "${pkgs[@]}" >/dev/null
    fi
    for c in $cmds; do command -v "$c" >/dev/null || { echo "$BENCH.sh: $c still missing" >&2; exit 1; }; done
    [ "$(nproc)" -ge 2 ] || { echo "$BENCH.sh: needs at least 2 cores (cores 0 and 1)" >&2; exit 1; }
}

# -------------------------------------------------------------------- build
# Builds tmx (release) unless --no-build; compiles the limit probes named in
# "$@" (bench/limits/NAME.c) into $LIM.
bench_build() {
    if [ "$BUILD" = 1 ]; then
        log "building tmx (release)"
        (cd "$ROOT" && cmake --preset release >/dev/null && cmake --build build/release -j2 >"$TMP/build.log" 2>&1) || {
            tail -30 "$TMP/build.log" >&2
            echo "$BENCH.sh: building tmx failed" >&2
            exit 1
        }
    fi
    [ -x "$PERF" ] && [ -x "$TMXRUN" ] || { echo "$BENCH.sh: $PERF or $TMXRUN missing" >&2; exit 1; }
    bench_limits "$@"
}
# Compiles the limit probes named in "$@" (bench/limits/NAME.c) into $LIM
# (a script that builds tmx its own way calls this alone).
bench_limits() {
    local p
    LIM=$TMP/limits
    mkdir -p "$LIM"
    for p in "$@"; do
        gcc -O2 -Wall -o "$LIM/$p" "$HERE/limits/$p.c"
    done
}

# ------------------------------------------------------------------ staging
# The new raw folder replaces the old one only after a complete run, so the
# report, the plot and raw/ always come from the same run.
bench_staging() {
    RAWNEW=$OUT/raw/.$BENCH.new.$$
    rm -rf "$RAWNEW"
    mkdir -p "$RAWNEW"
    DATA=$TMP/data.tsv
    : >"$DATA"
    : >"$TMP/failures.txt"
    : >"$TMP/busy.tsv"
    ROUND=0
}
rec() { printf '%s\t%s\t%s\t%s\t%s\n' "$ROUND" "$1" "$2" "$3" "$4" >>"$DATA"; } # SYSTEM METRIC SIZE VALUE

# ------------------------------------------------------------ other load
# Percent of cores 0 and 1 kept busy by other processes during ${1:-1} s in
# which this script runs nothing (the machine is shared): "busy0 busy1".
foreign_busy() {
    local a b
    a=$(grep -E '^cpu[01] ' /proc/stat)
    sleep "${1:-1}"
    b=$(grep -E '^cpu[01] ' /proc/stat)
    printf '%s\n%s\n' "$a" "$b" | awk '{
        t = 0; for (i = 2; i <= NF; i++) t += $i; idle = $5 + $6
        if ($1 in T) printf "%s%.0f", (n++ ? " " : ""), 100 * (1 - (idle - I[$1]) / (t - T[$1]))
        else { T[$1] = t; I[$1] = idle } } END { print "" }'
}
# Before each step: measures how busy other processes keep cores 0 and 1 and,
# unless --no-wait, waits (up to QUIET_MAX s per step, WAIT_BUDGET s per run)
# until both are below QUIET_PCT %. Records round, step, busy0, busy1, waited.
QUIET_PCT=25 WAIT_BUDGET=180 WAITED_HALF=0
quiet() { # STEP
    local step=$1 t0=$SECONDS b0 b1 n=0 w
    while :; do
        read -r b0 b1 <<<"$(foreign_busy 0.5)"
        n=$((n + 1))
        if [ "$b0" -lt $QUIET_PCT ] && [ "$b1" -lt $QUIET_PCT ]; then break; fi
        if [ $((SECONDS - t0)) -ge "$QUIET_MAX" ] || [ $(((WAITED_HALF + n) / 2)) -ge $WAIT_BUDGET ]; then break; fi
    done
    WAITED_HALF=$((WAITED_HALF + n - 1)) # half seconds spent waiting beyond the first sample
    w=$(awk -v n="$n" 'BEGIN { print (n - 1) / 2 }')
    printf '%s\t%s\t%s\t%s\t%s\n' "$ROUND" "$step" "$b0" "$b1" "$w" >>"$TMP/busy.tsv"
    [ $n = 1 ] || log "waited $w s for cores 0 and 1 to quieten (now $b0 % / $b1 % busy)"
}
# memcpy on core 0 at 1 MiB and 16 MiB (needs memcpy_bw in $LIM), with the
# other processes' load, at the start of a round: shows the machine's drift.
calibrate() {
    local f=$RAWNEW/r${ROUND}_calibration.txt busy
    date '+%F %T %Z' >"$f"
    busy=$(foreign_busy)
    echo "busy % of cores 0 and 1 during 1 s with this benchmark idle: $busy" >>"$f"
    echo "loadavg: $(cat /proc/loadavg)" >>"$f"
    ps -eo pid,pcpu,etimes,args --sort=-pcpu 2>/dev/null | head -6 | cut -c1-120 >>"$f" || true
    printf '%s\t%s\n' "$ROUND" "$busy" >>"$TMP/round_load"
    run "$f" "$LIM/memcpy_bw" -c 0 -t 3 -m 100 1048576 16777216
    [ $RC = 0 ] || fail calibration memcpy $RC "$f"
    awk '/^memcpy size=/ { split($2, s, "="); split($3, b, "="); print s[2] "\t" b[2] }' "$f" |
        while IFS=$'\t' read -r s v; do rec calib memcpy "$s" "$v"; done
    printf '%s\t%s\n' "$ROUND" "$(date +%T)" >>"$TMP/round_times"
}

# Runs ROUNDS interleaved rounds: a calibration, then every step named in
# "$@" (the function sys_STEP), the order rotated each round so that no
# step always runs first or last; then bench_round_end, if the script
# defines it.
bench_rounds() {
    local steps=("$@") k sys
    for ROUND in $(seq 1 "$ROUNDS"); do
        log "round $ROUND/$ROUNDS: calibration"
        quiet calibration
        calibrate
        for k in $(seq 0 $((${#steps[@]} - 1))); do
            sys=${steps[$(((k + ROUND - 1) % ${#steps[@]}))]}
            quiet "$sys"
            log "round $ROUND/$ROUNDS: $sys"
            "sys_$sys"
        done
        if declare -F bench_round_end >/dev/null; then bench_round_end; fi
    done
}

# --------------------------------------------------------------- statistics
# stats.tsv: system metric size n median min max per-round-values
# (sizes sort as versions: numbers in numeric order, and labels such as the
# "p5" of udp.sh's loss figures group as well)
bench_stats() {
    sort -t$'\t' -k2,2 -k3,3 -k4,4V -k1,1n "$DATA" | awk -F'\t' '
        { k = $2 FS $3 FS $4; if (k != prev && NR > 1) out(); prev = k; n++; v[n] = $5 + 0; r[n] = $5 }
        END { if (NR) out() }
        function out(   i, j, t, med, list) {
            list = r[1]; for (i = 2; i <= n; i++) list = list "/" r[i]
            for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
            med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
            printf "%s\t%d\t%.6g\t%.6g\t%.6g\t%s\n", prev, n, med, v[1], v[n], list; n = 0 }' >"$TMP/stats.tsv"
    cp "$TMP/stats.tsv" "$RAWNEW/stats.tsv"
}
st() { # SYSTEM METRIC SIZE FIELD(n|med|min|max|list) -> value or empty
    awk -F'\t' -v y="$1" -v m="$2" -v s="$3" -v f="$4" '$1 == y && $2 == m && $3 == s {
        print (f == "n" ? $4 : f == "med" ? $5 : f == "min" ? $6 : f == "max" ? $7 : $8); exit }' "$TMP/stats.tsv"
}
med() { st "$1" "$2" "$3" med; }
fmt() { # KIND VALUE
    [ -n "$2" ] || { echo "n/a"; return; }
    case "$1" in
    us) awk -v v="$2" 'BEGIN { printf (v < 10 ? "%.3f" : v < 1000 ? "%.1f" : "%.0f"), v }' ;;
    ns) awk -v v="$2" 'BEGIN { printf "%.0f", v * 1000 }' ;;
    mbs) awk -v v="$2" 'BEGIN { printf (v < 10 ? "%.2f" : "%.0f"), v }' ;;
    gbs) awk -v v="$2" 'BEGIN { printf "%.2f", v }' ;;
    rate) awk -v v="$2" 'BEGIN { printf "%.2f M", v / 1e6 }' ;;
    pct) awk -v v="$2" 'BEGIN { printf "%.2f %%", v }' ;;
    esac
}
fmtlist() { # KIND "a/b/c"
    local out="" x
    [ -n "$2" ] || { echo "n/a"; return; }
    for x in ${2//\// }; do out="$out${out:+ / }$(fmt "$1" "$x")"; done
    echo "$out"
}
ratio() { # A B -> A/B (2 decimals, or 2 significant digits when below 0.1)
    if [ -n "$1" ] && [ -n "$2" ]; then
        awk -v a="$1" -v b="$2" 'BEGIN { if (b <= 0) { printf "n/a"; exit } r = a / b; printf (r < 0.1 ? "%.2g" : "%.2f"), r }'
    else echo "n/a"; fi
}
# A's figure over B's in each round, median over the rounds that have both
# (2 decimals, or 2 significant digits when below 0.1): a ratio of figures
# measured minutes apart on a machine whose speed drifts compares its
# speeds as much as the two systems, one of figures measured back to back
# does not.
rratio() { # A B METRIC SIZE
    awk -F'\t' -v a="$1" -v b="$2" -v m="$3" -v s="$4" '
        $3 == m && $4 == s && $2 == a { va[$1] = $5 }
        $3 == m && $4 == s && $2 == b { vb[$1] = $5 }
        END {
            for (r in va) if ((r in vb) && vb[r] > 0) v[++n] = va[r] / vb[r]
            if (n == 0) { printf "n/a"; exit }
            for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
            x = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
            printf (x < 0.1 ? "%.2g" : "%.2f"), x }' "$DATA"
}
pct_of() { # A B -> "NN%" (A as a percentage of B)
    awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.0f%%", 100 * a / b; else printf "n/a" }'
}
row() { # LABEL SYSTEM METRIC SIZE KIND [TMX-METRIC TMX-SIZE]: last column = tmx's median / this median
    local med min max list r=""
    med=$(st "$2" "$3" "$4" med); min=$(st "$2" "$3" "$4" min); max=$(st "$2" "$3" "$4" max)
    list=$(st "$2" "$3" "$4" list)
    # a "-" for TMX-METRIC: an empty last column (a figure tmx's is not compared with)
    if [ "${6:-}" = - ]; then r=" | "; elif [ -n "${6:-}" ]; then r=" | $(ratio "$(st tmx "$6" "$7" med)" "$med")"; fi
    echo "| $1 | **$(fmt "$5" "$med")** | $(fmt "$5" "$min") | $(fmt "$5" "$max") | $(fmtlist "$5" "$list")$r |"
}
series() { # FILE SPEC: one "plot" item, only when FILE has data (gnuplot refuses empty files)
    [ -s "$1" ] || return 0
    printf "%s'%s' %s" "${SEP:-}" "$1" "$2"
    SEP=", "
}

# ------------------------------------------------------------------- report
pkgv() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "?"; }
# The first rows of the machine table (cores, CPU, memory, kernel, OS, tmx).
machine_rows() {
    local cpu mem hv git dirty
    cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
    mem=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576; exit }' /proc/meminfo)
    hv=$(grep -q '^flags.* hypervisor' /proc/cpuinfo && echo "virtual machine (hypervisor flag set)" || echo "bare metal")
    # TMX_GIT ("commit dirty-count"), when the script took it at its start
    if [ -n "${TMX_GIT:-}" ]; then
        read -r git dirty <<<"$TMX_GIT"
    else
        git=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo "?")
        dirty=$(cd "$ROOT" && git status --porcelain --untracked-files=no 2>/dev/null | wc -l)
    fi
    echo "| cores (nproc) | $(nproc) |"
    echo "| CPU | $cpu ($hv) |"
    echo "| memory | $mem |"
    echo "| kernel | $(uname -r) ($(uname -m)) |"
    echo "| OS | $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") |"
    echo "| tmx | commit $git$([ "$dirty" != 0 ] && echo " plus $dirty uncommitted tracked change(s) in the work tree"), build/release$([ -n "${TMX_BUILT:-}" ] && echo ", binaries built $TMX_BUILT") |"
}
# The calibration table and the other-load table. STEPS: the step names
# given to quiet(), in order.
calibration_tables() { # STEPS
    local r c1 c16 t l x steps=$1
    echo "| round | started | others' use of core 0 / core 1 | memcpy 1 MiB | memcpy 16 MiB |"
    echo "|---|---|---|---|---|"
    for r in $(seq 1 "$ROUNDS"); do
        c1=$(awk -F'\t' -v r="$r" '$1 == r && $2 == "calib" && $4 == 1048576 { print $5 }' "$DATA")
        c16=$(awk -F'\t' -v r="$r" '$1 == r && $2 == "calib" && $4 == 16777216 { print $5 }' "$DATA")
        t=$(awk -v r="$r" '$1 == r { print $2 }' "$TMP/round_times")
        l=$(awk -F'\t' -v r="$r" '$1 == r { split($2, a, " "); print a[1] " % / " a[2] " %" }' "$TMP/round_load")
        echo "| $r | $t | $l | $(fmt gbs "$c1") | $(fmt gbs "$c16") |"
    done
    echo
    echo "### Other processes on cores 0 and 1 just before each step"
    echo
    echo "Busy % of core 0 / core 1 taken by other processes over 0.5 s while this script ran nothing,"
    echo "$([ "$QUIET_MAX" = 0 ] && echo "measured once (--no-wait)." || echo "after waiting up to $QUIET_MAX s for both to drop below $QUIET_PCT % (waited $(awk -v h="$WAITED_HALF" 'BEGIN { print h / 2 }') s in all, budget $WAIT_BUDGET s).") A step that"
    echo "started above that (bold) was measured while something else competed for its cores."
    echo
    echo "| round | $(echo $steps | sed 's/ / | /g') |"
    echo "|---$(for x in $steps; do printf '|---'; done)|"
    for r in $(seq 1 "$ROUNDS"); do
        printf '| %s ' "$r"
        for x in $steps; do
            awk -F'\t' -v r="$r" -v x="$x" -v q="$QUIET_PCT" '$1 == r && $2 == x {
                c = $3 "/" $4 " %"; if ($3 >= q || $4 >= q) c = "**" c "**"
                if ($5 > 0) c = c " (waited " $5 " s)"; printf "| %s ", c; f = 1 } END { if (!f) printf "| n/a " }' "$TMP/busy.tsv"
        done
        echo "|"
    done
}
problems_section() {
    echo "## Problems seen in this run"
    echo
    if [ -s "$TMP/failures.txt" ]; then
        sed 's/^/- /' "$TMP/failures.txt"
    else
        echo "None: every command exited 0 and every figure was parsed."
    fi
}

# ----------------------------------------------------------------- publish
# Moves $BENCH.md (from $MD), $BENCH.png and the raw folder into place.
bench_publish() {
    mv "$RAWNEW/$BENCH.png" "$OUT/$BENCH.png" 2>/dev/null || true
    cp "$MD" "$OUT/$BENCH.md"
    rm -rf "$OUT/raw/$BENCH"
    mv "$RAWNEW" "$OUT/raw/$BENCH"
    RAWNEW=""
    log "done in $((ELAPSED / 60)) min $((ELAPSED % 60)) s: $OUT/$BENCH.md, $OUT/$BENCH.png, $OUT/raw/$BENCH/"
}
