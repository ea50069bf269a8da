#!/bin/bash
# Runs a command whose exit status is known not to be 0 (a tmxrun job in
# which a rank is meant to die) and passes when the status is the expected
# one and the output (stdout and stderr together) holds every expected line.
#   usage: run_expect.sh [--rc N] --expect LINE [--expect LINE...] -- CMD [ARGS...]
# Prints the command's output, then each check; exits 0 only if all pass.
set -u

usage() {
    echo "usage: $0 [--rc N] --expect LINE [--expect LINE...] -- CMD [ARGS...]" >&2
    exit 2
}

WANT_RC=""
EXPECT=()
while [ $# -gt 0 ]; do
    case $1 in
    --rc) [ $# -ge 2 ] || usage; WANT_RC=$2; shift 2 ;;
    --expect) [ $# -ge 2 ] || usage; EXPECT+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) usage ;;
    esac
done
[ $# -ge 1 ] && [ ${#EXPECT[@]} -ge 1 ] || usage

OUT=$(mktemp "${TMPDIR:-/tmp}/run_expect.XXXXXX") || exit 1
trap 'rm -f "$OUT"' EXIT

T0=$(date +%s%N)
"$@" >"$OUT" 2>&1
RC=$?
MS=$((($(date +%s%N) - T0) / 1000000))
echo "---- output of: $*"
cat "$OUT"
echo "---- exit status $RC after $MS ms"

FAILS=0
if [ -n "$WANT_RC" ] && [ "$RC" -ne "$WANT_RC" ]; then
    echo "FAIL: exit status $RC, expected $WANT_RC"
    FAILS=$((FAILS + 1))
fi
for line in "${EXPECT[@]}"; do
    if grep -qFx -- "$line" "$OUT"; then
        echo "ok: output has the line '$line'"
    else
        echo "FAIL: output lacks the line '$line'"
        FAILS=$((FAILS + 1))
    fi
done
if grep -q "mp_test FAIL" "$OUT"; then
    echo "FAIL: a rank reported a failed check (see 'mp_test FAIL' above)"
    FAILS=$((FAILS + 1))
fi
[ "$FAILS" -eq 0 ] && echo "PASS" || echo "$FAILS check(s) failed"
[ "$FAILS" -eq 0 ]
