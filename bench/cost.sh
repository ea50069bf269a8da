#!/usr/bin/env bash
# bench/cost.sh - what one short message costs, layer by layer, through
# Open MPI over tmx, for two tmx commits side by side (and for ob1 + vader).
#
# Runs bench/mpi/osu_p2p.c (latency at 8 B) under valgrind's callgrind,
# with --cache-sim=yes, for each commit's provider under pml cm / mtl ofi,
# and once under ob1 + vader, then divides the cost of each layer's entry
# points by the messages: instructions (Ir) and simulated first-level data
# misses (D1mr + D1mw) per message. Callgrind counts what a core executes
# exactly, so the figures do not drift with the machine; its cache is a
# model of one core's, so the misses it reports are the layer's own
# working set, not the lines that cross between cores (which this virtual
# machine's missing hardware counters would show: `perf stat` answers
# "not supported" here).
#
# Usage: bench/cost.sh [-o FILE] COMMIT_A COMMIT_B
#   -o FILE   the markdown table (default: standard output)
set -euo pipefail
OUT=""
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while getopts "o:h" o; do
    case $o in
    o) OUT=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || usage
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for t in valgrind callgrind_annotate mpicc mpirun cmake python3; do
    command -v "$t" >/dev/null || { echo "cost.sh: $t is missing" >&2; exit 1; }
done
TMP=$(mktemp -d)
cleanup() {
    for w in "$TMP"/wt-*; do
        [ -d "$w" ] && git -C "$ROOT" worktree remove --force "$w" >/dev/null 2>&1 || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
ROOTOPT=()
[ "$(id -u)" = 0 ] && ROOTOPT=(--allow-run-as-root)

mpicc -O2 -o "$TMP/osu_p2p" "$ROOT/bench/mpi/osu_p2p.c"
cc -O2 -o "$TMP/fi_poll" "$ROOT/bench/fi/fi_poll.c" -lfabric
for v in A B; do
    c=$([ $v = A ] && echo "$1" || echo "$2")
    git -C "$ROOT" worktree add --detach "$TMP/wt-$v" "$c" >/dev/null 2>&1
    echo "cost.sh: building $v=$c" >&2
    cmake -S "$TMP/wt-$v" -B "$TMP/build-$v" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$TMP/build-$v" -j "$(nproc)" --target tmx-fi >/dev/null
done

VG=(valgrind --tool=callgrind --cache-sim=yes)
run_cg() { # NAME mpirun-args...
    local name=$1; shift
    echo "cost.sh: callgrind of $name" >&2
    timeout 900 mpirun "${ROOTOPT[@]}" -n 2 --bind-to none "$@" \
        "${VG[@]}" --callgrind-out-file="$TMP/cg.$name.%p" "$TMP/osu_p2p" -t lat -s 8 -d 1 \
        >"$TMP/$name.log" 2>&1
}
for v in A B; do
    run_cg "$v" --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tmx \
        -x FI_PROVIDER_PATH="$TMP/build-$v/fabric"
done
run_cg vader --mca pml ob1 --mca btl self,vader
# an empty fi_cq_read: POLLS reads less none, divided by POLLS
POLLS=100000
for v in A B; do
    for k in 0 $POLLS; do
        FI_PROVIDER_PATH="$TMP/build-$v/fabric" valgrind --tool=callgrind --callgrind-out-file=/dev/null \
            "$TMP/fi_poll" $k 2>"$TMP/poll.$v.$k" >/dev/null
    done
    echo $(( ($(sed -n 's/.*I *refs: *//p' "$TMP/poll.$v.$POLLS" | tr -d ,) - \
              $(sed -n 's/.*I *refs: *//p' "$TMP/poll.$v.0" | tr -d ,)) / POLLS )) >"$TMP/poll.$v"
done

# the report names commits, not what named them (HEAD moves)
CA=$(git -C "$ROOT" rev-parse --short "$1") CB=$(git -C "$ROOT" rev-parse --short "$2")
python3 - "$TMP" "$CA" "$CB" >"$TMP/table.md" <<'EOF'
import collections, glob, re, sys

tmp, ca, cb = sys.argv[1:4]

def base(name):
    """A function's name without the suffixes of gcc's clones
    (.lto_priv.0, .constprop.0, .isra.0, .part.0)."""
    return re.sub(r'(\.(lto_priv|constprop|isra|part|cold)\.\d+)+$', '', name)

def load(path):
    """Inclusive and self event counts and call counts per function."""
    names, events = {}, None
    selfc = collections.defaultdict(lambda: [0] * 8)
    incl = collections.defaultdict(lambda: [0] * 8)
    calls = collections.Counter()
    fn = cfn = None
    pending = None
    def nm(s):
        m = re.match(r'\((\d+)\)(?: (.*))?', s)
        if not m:
            return s
        if m.group(2):
            names[m.group(1)] = base(m.group(2))
        return names.get(m.group(1), m.group(1))
    for line in open(path):
        line = line.rstrip('\n')
        if line.startswith('events:'):
            events = line.split()[1:]
        elif line.startswith('fn='):
            fn = nm(line[3:])
        elif line.startswith('cfn='):
            cfn = nm(line[4:])
        elif line.startswith('calls='):
            pending = int(line[6:].split()[0])
        elif line and (line[0].isdigit() or line[0] in '+-*'):
            parts = line.split()[1:]
            vals = [int(x) for x in parts] + [0] * (8 - len(parts))
            if pending is not None:
                if cfn != fn: # a clone of the same function counts once, as itself
                    calls[cfn] += pending
                    for i, x in enumerate(vals[:8]):
                        incl[fn][i] += x
                pending = None
            else:
                for i, x in enumerate(vals[:8]):
                    selfc[fn][i] += x
                    incl[fn][i] += x
    idx = {e: i for i, e in enumerate(events)}
    return idx, incl, calls

def per(files, names, ev):
    """Sum over the processes of the inclusive cost of names, per message."""
    tot = 0
    msgs = 0
    for f in files:
        idx, incl, calls = load(f)
        for n in names:
            tot += sum(incl[n][idx[e]] for e in ev if e in idx)
        msgs += calls.get('PMPI_Send', 0)
    return tot / msgs if msgs else float('nan')

IR = ['Ir']
MISS = ['D1mr', 'D1mw']
# Rows by the entry points that stay functions of their own however the
# libraries are built: with link-time optimisation (release builds) tmx's
# functions are inlined into the provider's, so the split between the
# provider, tmx's core and the transport is not kept.
layers = [
    ('sending: Open MPI (pml cm, mtl ofi), per MPI_Send', ['PMPI_Send'], ['t_injectdata']),
    ('sending: the provider, tmx and the shm transport (fi_tinjectdata)', ['t_injectdata'], []),
    ('receiving: posting, the provider and tmx (fi_trecv)', ['t_recv'], []),
    ('receiving: the arrival, tmx (proto_recv_cb)', ['proto_recv_cb'], []),
    ('receiving: the completion, the provider (cq_take)', ['cq_take'], []),
]

def row(files, inc, exc, ev):
    return per(files, inc, ev) - per(files, exc, ev)

fa = sorted(glob.glob(f'{tmp}/cg.A.*'))
fb = sorted(glob.glob(f'{tmp}/cg.B.*'))
fv = sorted(glob.glob(f'{tmp}/cg.vader.*'))
print(f'| layer (per message) | instructions, A = {ca} | B = {cb} | B - A | '
      f'D1 misses (simulated), A | B |')
print('|---|---|---|---|---|---|')
ta = tb = 0
for label, inc, exc in layers:
    a, b = row(fa, inc, exc, IR), row(fb, inc, exc, IR)
    ma, mb = row(fa, inc, exc, MISS), row(fb, inc, exc, MISS)
    ta += a
    tb += b
    print(f'| {label} | {a:.0f} | {b:.0f} | {b - a:+.0f} | {ma:.2f} | {mb:.2f} |')
print(f'| **sum of the rows** | **{ta:.0f}** | **{tb:.0f}** | **{tb - ta:+.0f}** | | |')
# an empty poll: what Open MPI's progress loop pays each time it finds nothing
def poll(files):
    tot = n = 0
    for f in files:
        idx, incl, calls = load(f)
        tot += incl['cq_read'][idx['Ir']]
        n += calls.get('cq_read', 0)
    return tot / n if n else float('nan')
print(f'| fi_cq_read, mean over all calls (most find nothing) | {poll(fa):.0f} | {poll(fb):.0f} | '
      f'{poll(fb) - poll(fa):+.0f} | | |')
ea, eb = (int(open(f'{tmp}/poll.{v}').read()) for v in 'AB')
print(f'| an fi_cq_read that finds nothing (bench/fi/fi_poll.c) | {ea} | {eb} | {eb - ea:+d} | | |')
print()
vs = per(fv, ['PMPI_Send'], IR)
vm = per(fv, ['mca_pml_ob1_recv_frag_callback_match'], IR)
print(f'ob1 + vader in the same run, for scale: MPI_Send {vs:.0f} instructions per message (all '
      f'of Open MPI\'s and vader\'s sending), the receiver\'s match of an arriving fragment '
      f'(mca_pml_ob1_recv_frag_callback_match) {vm:.0f}.')
EOF
{
    echo "Per-message cost by layer: callgrind (--cache-sim=yes) of \`osu_p2p -t lat -s 8 -d 1\`"
    echo "(10 000 round trips and 1 000 of warm-up) under \`mpirun -n 2\`, \`bench/cost.sh $CA $CB\`,"
    echo "$(date -u '+%Y-%m-%d'). Each figure is the layer's inclusive cost summed over both"
    echo "processes, divided by the messages both sent (each message is sent by one process and"
    echo "received by the other). The Open MPI row leaves out the provider's part; the others are"
    echo "whole entry points (with link-time optimisation tmx is inlined into the provider)."
    echo
    cat "$TMP/table.md"
} >"$TMP/report.md"
if [ -n "$OUT" ]; then cp "$TMP/report.md" "$OUT"; else cat "$TMP/report.md"; fi
