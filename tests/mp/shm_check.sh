#!/bin/bash
# Leftovers of the multi-process tests in /dev/shm. The shm transport uses
# memfds, never linked into a file system, and a shared UDP port's node
# table is removed by the last process of its job (or by the next job after
# a job killed whole), so no entry with "tmx" in its name may stay there
# that no process has open, whatever the tests did or how their ranks died.
#   shm_check.sh snapshot FILE   record the "tmx" entries present now
#   shm_check.sh check FILE      fail on any "tmx" entry not in FILE
#                                (every one, if FILE is missing)
set -u

DIR=${TMX_SHM_DIR:-/dev/shm}

if [ $# -ne 2 ] || { [ "$1" != snapshot ] && [ "$1" != check ]; }; then
    echo "usage: $0 snapshot|check FILE" >&2
    exit 2
fi
MODE=$1
FILE=$2

tmx_entries() {
    ls -A "$DIR" 2>/dev/null | grep -i tmx | sort
}

if [ "$MODE" = snapshot ]; then
    tmx_entries >"$FILE" || true
    echo "$(wc -l <"$FILE") entries with 'tmx' in $DIR before the tests"
    exit 0
fi

NOW=$(tmx_entries)
if [ -f "$FILE" ]; then
    OLD=$(cat "$FILE")
    [ -n "$OLD" ] && echo "(present before the tests, ignored:)" && echo "$OLD"
    NEW=$(comm -13 <(echo "$OLD") <(echo "$NOW") | grep -v '^$')
else
    echo "no snapshot $FILE: every 'tmx' entry counts"
    NEW=$NOW
fi
# A shared UDP port's node table (tmx-udp-*, docs/udp.md) belongs to the
# job that has it open: a job still running beside this check (ctest -j)
# holds its own. Only a table nobody has open is left behind.
open_by_someone() {
    local f
    for f in /proc/[0-9]*/fd/*; do
        [ "$(readlink "$f" 2>/dev/null)" = "$DIR/$1" ] && return 0
    done
    return 1
}
# The listing above and the scan of /proc race with a job ending beside
# this check: its last process removes the table just after closing it.
# A table counts only if it is still there, and still unopened, a while
# later.
gone_or_open() {
    local i
    for i in 1 2 3 4 5 6 7 8 9 10; do
        [ -e "$DIR/$1" ] || return 0
        open_by_someone "$1" && return 0
        sleep 0.3
    done
    return 1
}
LEFT=""
for e in $NEW; do
    if [[ $e == tmx-udp-* ]] && gone_or_open "$e"; then
        echo "(in use by a running job or removed by it meanwhile, not counted: $e)"
        continue
    fi
    LEFT="$LEFT$e"$'\n'
done
NEW=$(printf '%s' "$LEFT" | grep -v '^$' || true)
if [ -n "$NEW" ]; then
    echo "FAIL: the tests left these entries in $DIR:"
    echo "$NEW"
    exit 1
fi
echo "ok: no new entry with 'tmx' in $DIR"
