# shellcheck shell=bash
# Helpers shared by tmxrun_test.sh and tmxrun_hosts_test.sh, which source
# this file, after setting TEST_NAME (their name, as the summary says it)
# and set -u, with their own arguments still in place:
#   . "$(dirname "$0")/tmxrun_lib.sh"
# It checks those arguments (TMXRUN KVS_RANK), makes the job marker MARK and
# the temporary directory TMP, traps EXIT to clean up, and defines the case
# and check helpers; finish prints the summary and sets the exit status.

if [ $# -ne 2 ]; then
    echo "usage: $0 TMXRUN KVS_RANK" >&2
    exit 2
fi
TMXRUN=$1
# shellcheck disable=SC2034 # the scripts' to use
KVS_RANK=$2
MARK="${TEST_NAME//_/-}-$$-$RANDOM$RANDOM"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/${TEST_NAME//_/-}.XXXXXX") || exit 1
BG_PID=""
FAILS=0
CASE=""

# Kills, by pid, whatever this script started that is still running.
kill_ours() {
    [ -n "$BG_PID" ] && kill -KILL "$BG_PID" 2>/dev/null
    for p in $(pgrep -f -- "$MARK"); do
        kill -KILL "$p" 2>/dev/null
    done
}

# What a script has to undo besides (after its processes are killed, before
# TMP goes); it redefines this.
cleanup_more() {
    :
}

cleanup() {
    kill_ours
    cleanup_more
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM HUP

fail() {
    echo "FAIL [$CASE]: $*"
    echo "---- stdout"
    cat "$TMP/out" 2>/dev/null
    echo "---- stderr"
    cat "$TMP/err" 2>/dev/null
    echo "----"
    FAILS=$((FAILS + 1))
}

begin() {
    CASE=$1
    echo "== $CASE"
    : >"$TMP/out"
    : >"$TMP/err"
}

now_ms() {
    echo $(($(date +%s%N) / 1000000))
}

# Runs tmxrun in the foreground, but for RUN_LIMIT seconds at most, so that
# a hang is a failure that says so; sets RC and MS (elapsed milliseconds).
RUN_LIMIT=20
run() {
    local t0
    t0=$(now_ms)
    timeout -k 2 "$RUN_LIMIT" "$TMXRUN" "$@" >"$TMP/out" 2>"$TMP/err"
    RC=$?
    MS=$(($(now_ms) - t0))
    if [ "$MS" -ge $((RUN_LIMIT * 1000)) ]; then
        fail "tmxrun $* hung: stopped by the test after $RUN_LIMIT s"
    fi
}

expect_rc() {
    if [ "$RC" -ne "$1" ]; then
        fail "exit status $RC, expected $1: $2"
    else
        echo "   ok: exit status $RC ($2)"
    fi
}

expect_faster() {
    if [ "$MS" -ge "$1" ]; then
        fail "took $MS ms, expected under $1 ms: $2"
    else
        echo "   ok: took $MS ms < $1 ms ($2)"
    fi
}

expect_slower() {
    if [ "$MS" -lt "$1" ]; then
        fail "took $MS ms, expected at least $1 ms: $2"
    else
        echo "   ok: took $MS ms >= $1 ms ($2)"
    fi
}

# expect_line FILE PATTERN WHY: some line of FILE matches the grep -E PATTERN.
expect_line() {
    if grep -Eq -- "$2" "$TMP/$1"; then
        echo "   ok: $1 has /$2/ ($3)"
    else
        fail "$1 has no line matching /$2/: $3"
    fi
}

expect_no_line() {
    if grep -Eq -- "$2" "$TMP/$1"; then
        fail "$1 has a line matching /$2/: $3"
    else
        echo "   ok: $1 has no /$2/ ($3)"
    fi
}

# expect_usage ARGS...: tmxrun with each ARGS (split into words at blanks)
# exits 2 with its usage on stderr.
expect_usage() {
    local args
    for args in "$@"; do
        # shellcheck disable=SC2086 # the words are the arguments
        run $args
        if [ "$RC" -eq 2 ] && grep -q '^usage: tmxrun' "$TMP/err"; then
            echo "   ok: tmxrun $args -> 2 with usage"
        else
            fail "tmxrun $args -> exit status $RC, expected 2 with usage on stderr"
        fi
    done
}

# No process with the marker may survive its job (a killed process takes a
# moment to disappear from the process table, hence the short wait).
expect_no_leftovers() {
    for _ in $(seq 1 50); do
        pgrep -f -- "$MARK" >/dev/null || {
            echo "   ok: no process left behind"
            return
        }
        sleep 0.1
    done
    fail "processes left behind: $(pgrep -a -f -- "$MARK" | tr '\n' ';')"
    kill_ours
}

# Waits until at least $1 processes carry the marker (tmxrun and its ranks).
wait_for_procs() {
    for _ in $(seq 1 200); do
        [ "$(pgrep -c -f -- "$MARK")" -ge "$1" ] && return 0
        sleep 0.05
    done
    fail "the job did not start $1 processes in 10 s"
    return 1
}

# Sends signal $1 to the job started in the background and waits for it,
# RUN_LIMIT seconds at most (then it is killed, and that is a failure):
# RC its exit status, MS how long it took to end.
stop_bg() {
    local t0 i
    t0=$(now_ms)
    kill "-$1" "$BG_PID"
    # bash reaps a background job as it ends: kill -0 fails from then on
    for ((i = 0; i < RUN_LIMIT * 20; i++)); do
        kill -0 "$BG_PID" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$BG_PID" 2>/dev/null; then
        fail "tmxrun did not end within $RUN_LIMIT s of SIG$1: killed by the test"
        kill -KILL "$BG_PID"
    fi
    wait "$BG_PID"
    RC=$?
    MS=$(($(now_ms) - t0))
    BG_PID=""
}

# The summary, last: exit status 0 only when every check passed.
finish() {
    echo
    if [ "$FAILS" -ne 0 ]; then
        echo "$TEST_NAME: $FAILS check(s) failed"
        exit 1
    fi
    echo "$TEST_NAME: all checks passed"
}
