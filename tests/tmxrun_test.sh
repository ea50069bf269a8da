#!/bin/bash
# Multi-process tests of tmxrun and its key-value service.
#   usage: tmxrun_test.sh PATH/TO/tmxrun PATH/TO/kvs_rank
# Every job carries a unique marker argument, so that pgrep can tell whether
# any of its processes outlived it. Prints each check; on failure, why, with
# the job's output. Exit status 0 only when every check passed. The helpers
# it shares with tmxrun_hosts_test.sh are in tmxrun_lib.sh.
# shellcheck disable=SC2016 # $TMX_* in single quotes are the ranks' to expand
set -u
TEST_NAME=tmxrun_test
# shellcheck source-path=SCRIPTDIR source=tmxrun_lib.sh
. "$(dirname "$0")/tmxrun_lib.sh"

# ---------------------------------------------------------------- cases

begin "one rank exchanges with itself"
run -n 1 "$KVS_RANK" "$MARK"
expect_rc 0 "a 1-rank job succeeds"
expect_line out '^kvs_rank: 1 ranks exchanged values$' "rank 0 reports the exchange"
expect_no_leftovers

begin "eight ranks exchange values through the key-value service"
run -n 8 "$KVS_RANK" "$MARK"
expect_rc 0 "every rank put, fenced, read and checked every other rank's values"
expect_line out '^kvs_rank: 8 ranks exchanged values$' "rank 0 reports the exchange"
expect_no_leftovers

begin "64 ranks exchange values"
run -n 64 "$KVS_RANK" "$MARK"
expect_rc 0 "a larger job succeeds too"
expect_no_leftovers

begin "a rank's exit status is tmxrun's, and the other ranks are stopped"
run -n 4 "$KVS_RANK" --exit-rank 2 3 --sleep 30 "$MARK"
expect_rc 3 "rank 2 exited with 3"
expect_faster 5000 "the ranks sleeping 30 s were terminated, not waited for"
expect_line err 'rank 2 exited with status 3' "tmxrun says which rank failed"
expect_no_leftovers

begin "a rank killed by SIGKILL gives 137"
run -n 3 "$KVS_RANK" --kill-rank 1 --sleep 30 "$MARK"
expect_rc 137 "128 + SIGKILL"
expect_faster 5000 "the other ranks were terminated"
expect_line err 'rank 1 was killed by signal 9' "tmxrun names the signal"
expect_no_leftovers

begin "a rank killed while the others wait in FENCE"
run -n 4 "$KVS_RANK" --kill-rank 3 "$MARK"
expect_rc 137 "128 + SIGKILL"
expect_faster 5000 "the others did not hang in the fence"
expect_no_leftovers

begin "a rank that exits 0 without fencing fails the others' fence"
run -n 4 "$KVS_RANK" --leave-rank 3 "$MARK"
expect_rc 42 "the waiting ranks got ERR from FENCE and exited 42"
expect_faster 5000 "nobody hung in the fence"
expect_line out 'fence failed as expected' "a waiting rank saw the error"
expect_line err 'rank 3 exited before reaching the fence' "the reason reaches the ranks"
expect_no_leftovers

begin "--timeout stops the job with 124"
run -n 2 --timeout 1 "$KVS_RANK" --sleep 30 "$MARK"
expect_rc 124 "timeout"
expect_slower 900 "not before the timeout"
expect_faster 5000 "soon after the timeout"
expect_line err 'timed out after 1 s' "tmxrun says why"
expect_no_leftovers

begin "ranks that ignore SIGTERM get SIGKILL 2 s later"
run -n 2 --timeout 0.5 "$KVS_RANK" --ignore-term --sleep 30 "$MARK"
expect_rc 124 "timeout"
expect_slower 2400 "SIGTERM first, then a 2 s grace"
expect_faster 7000 "then SIGKILL"
expect_line err 'SIGKILL' "tmxrun says it escalated"
expect_no_leftovers

begin "--tag-output prefixes every line with [rank]"
run -n 2 --tag-output \
    sh -c 'echo "out$TMX_RANK"; echo "err$TMX_RANK" >&2; printf "part$TMX_RANK"' "$MARK"
expect_rc 0 "the job succeeds"
expect_line out '^\[0\] out0$' "rank 0's stdout line is tagged"
expect_line out '^\[1\] out1$' "rank 1's stdout line is tagged"
expect_line err '^\[0\] err0$' "rank 0's stderr line is tagged"
expect_line err '^\[1\] err1$' "rank 1's stderr line is tagged"
expect_line out '^\[1\] part1$' "a partial last line is flushed at exit, tagged"
expect_no_leftovers

begin "--tag-output: a line longer than 64 KiB is split into tagged lines"
run -n 2 -p sh -c 'head -c 200000 /dev/zero | tr "\0" a; echo' "$MARK"
expect_rc 0 "the job succeeds"
expect_no_line out '^[^[]' "every line of output is tagged"
expect_no_line out '.\[' "no rank's output runs into another's line"
if [ "$(tr -cd a <"$TMP/out" | wc -c)" -eq 400000 ]; then
    echo "   ok: all 400000 bytes arrived"
else
    fail "expected 400000 bytes of 'a', got $(tr -cd a <"$TMP/out" | wc -c)"
fi
expect_no_leftovers

begin "-p, and without it no tags"
run -n 3 -p sh -c 'echo "r$TMX_RANK of $TMX_SIZE"' "$MARK"
expect_line out '^\[2\] r2 of 3$' "-p is --tag-output"
run -n 2 sh -c 'echo "line$TMX_RANK"; printf "tail$TMX_RANK"' "$MARK"
expect_rc 0 "the job succeeds"
expect_line out '^(line0|tail[01].*)$' "untagged output is passed as is"
expect_no_line out '^\[' "no tags without --tag-output"
if [ "$(grep -o 'tail[01]' "$TMP/out" | sort | tr -d '\n')" = "tail0tail1" ]; then
    echo "   ok: both partial last lines were flushed"
else
    fail "partial last lines lost"
fi
expect_no_leftovers

begin "the environment: rank, size, job id and service address"
run -n 3 sh -c 'echo "$TMX_RANK $TMX_SIZE $TMX_JOBID $TMX_KVS"' "$MARK"
expect_rc 0 "the job succeeds"
expect_line out '^2 3 [0-9a-f]{16} unix:@tmx-kvs-[0-9]+-[0-9a-f]+$' "rank 2 sees its environment"
if [ "$(cut -d' ' -f3,4 "$TMP/out" | sort -u | wc -l)" -eq 1 ]; then
    echo "   ok: every rank sees the same job id and address"
else
    fail "the ranks disagree on the job id or address"
fi
expect_no_leftovers

begin "malformed requests get ERR and a log line, and the service carries on"
run -n 1 "$KVS_RANK" --bad-requests "$MARK"
expect_rc 0 "every bad request got ERR, good ones still worked"
expect_line err 'kvs: bad request' "tmxrun logged them"
expect_no_leftovers

begin "the service keeps up with many keys"
run -n 1 "$KVS_RANK" --many-keys 300000 "$MARK"
expect_rc 0 "300000 keys put, every 1000th read back"
expect_line out '^kvs_rank: 300000 keys put and read back$' "the rank says so"
expect_faster 10000 "lookups do not slow down as the store grows"
expect_no_leftovers

begin "requests queued behind a waiting GET do not make tmxrun spin"
run -n 1 "$KVS_RANK" --stalled-pipeline "$MARK"
expect_rc 0 "tmxrun used little CPU while the connection's input was full"
expect_line out '^kvs_rank: tmxrun idle behind a waiting GET' "the rank says so"
expect_no_leftovers

begin "a program that cannot be run"
run -n 2 "$TMP/no-such-program-$MARK"
expect_rc 127 "as a shell would"
expect_line err 'cannot run' "tmxrun says why"
expect_no_leftovers

begin "what a rank leaves running in its process group is killed"
run -n 2 sh -c '"$1" --sleep 30 "$0" & echo started' "$MARK" "$KVS_RANK"
expect_rc 0 "the ranks exit 0"
expect_faster 5000 "tmxrun did not wait for the background sleep"
expect_no_leftovers

begin "bad options give usage and exit 2"
expect_usage "-n 0 true" "-n 4097 true" "-n x true" "-n -1 true" "-n 2" "true" \
    "--bogus -n 1 true" "-n 1 --timeout 0 true" "-n 1 --timeout -3 true" \
    "-n 1 --timeout abc true" "-n 1 --timeout 10000001 true" "-n 1 --timeout 1e300 true" \
    "-n 1 --timeout" "-n"
run -n 1 --timeout 3000000 sh -c 'exit 0' "$MARK"
expect_rc 0 "a --timeout past poll()'s int milliseconds (clamped) is accepted"
expect_faster 5000 "and the job ends when its rank does"
run --help
expect_rc 0 "--help succeeds"
expect_line out '^usage: tmxrun' "--help prints usage on stdout"
run -n 1 -- sh -c 'exit 0' "$MARK"
expect_rc 0 "-- ends tmxrun's options"
run -n 1 sh -c 'exit 5' -n 3 "$MARK"
expect_rc 5 "options after the program are the program's"

# A background tmxrun; sets BG_PID.
start_bg() {
    "$TMXRUN" "$@" >"$TMP/out" 2>"$TMP/err" &
    BG_PID=$!
}

# Sends signal $1 to the background tmxrun once its ranks run; expects $2.
signal_case() {
    start_bg -n 3 "$KVS_RANK" --sleep 30 "$MARK"
    wait_for_procs 4 || return
    stop_bg "$1"
    expect_rc "$2" "tmxrun got SIG$1"
    expect_faster 5000 "the ranks were terminated"
    expect_no_leftovers
}

begin "Ctrl-C (SIGINT) to tmxrun"
signal_case INT 130
begin "SIGTERM to tmxrun"
signal_case TERM 143

begin "Ctrl-\\ (SIGQUIT) to tmxrun stops the job like Ctrl-C, children of the ranks included"
# as from a terminal: a script's background job would ignore SIGQUIT
env --default-signal=QUIT "$TMXRUN" -n 2 sh -c '"$1" --sleep 30 "$0" & wait' "$MARK" "$KVS_RANK" \
    >"$TMP/out" 2>"$TMP/err" &
BG_PID=$!
if wait_for_procs 5; then
    stop_bg QUIT
    expect_rc 131 "128 + SIGQUIT"
    expect_faster 5000 "the ranks were terminated"
    expect_line err 'got signal 3' "tmxrun stopped the job itself"
    expect_no_leftovers
fi

begin "SIGUSR1 and SIGUSR2 to tmxrun go on to the ranks, as mpirun and srun forward them"
start_bg -n 2 sh -c 'trap "echo usr1" USR1; trap "echo usr2; exit 0" USR2
    while :; do sleep 0.1; done' "$MARK"
if wait_for_procs 3; then
    kill -USR1 "$BG_PID"
    sleep 0.5
    stop_bg USR2
    expect_rc 0 "the ranks ended by themselves"
    expect_faster 5000 "at once"
    [ "$(grep -c '^usr1$' "$TMP/out")" -eq 2 ] || fail "both ranks should have got SIGUSR1"
    [ "$(grep -c '^usr2$' "$TMP/out")" -eq 2 ] || fail "both ranks should have got SIGUSR2"
    expect_no_leftovers
fi

# A reader of tmxrun's stdout that stops reading (a pager, a stopped
# pipeline): a process holding a FIFO open that never reads it.
HOLD_PID=""
cleanup_more() {
    [ -n "$HOLD_PID" ] && kill -KILL "$HOLD_PID" 2>/dev/null
}
hold_fifo() {
    rm -f "$TMP/fifo"
    mkfifo "$TMP/fifo"
    sleep 60 <"$TMP/fifo" &
    HOLD_PID=$!
}
unhold_fifo() {
    kill -KILL "$HOLD_PID" 2>/dev/null
    wait "$HOLD_PID" 2>/dev/null
    HOLD_PID=""
}
# Ranks that print $1 bytes of lines, then run the command after it.
LINES_THEN='yes 0123456789 | head -c "$1"; shift; [ $# -eq 0 ] || exec "$@"'

begin "stdout not read: Ctrl-C still stops the job at once"
hold_fifo
"$TMXRUN" -n 2 sh -c "$LINES_THEN" "$MARK" 4000000 "$KVS_RANK" --sleep 30 "$MARK" \
    >"$TMP/fifo" 2>"$TMP/err" &
BG_PID=$!
if wait_for_procs 3; then
    sleep 1
    stop_bg INT
    expect_rc 130 "tmxrun got SIGINT while its stdout was full"
    expect_faster 5000 "the ranks were terminated"
    expect_no_leftovers
fi
unhold_fifo

begin "stdout not read once the ranks are gone: Ctrl-C ends tmxrun, saying what it dropped"
hold_fifo
"$TMXRUN" -n 2 sh -c "$LINES_THEN" "$MARK" 100000 >"$TMP/fifo" 2>"$TMP/err" &
BG_PID=$!
sleep 1.5
stop_bg INT
expect_rc 130 "tmxrun got SIGINT while the ranks' last output waited"
expect_faster 5000 "tmxrun did not wait for the reader"
expect_line err 'bytes of the ranks. output not written' "it says how much output it dropped"
expect_no_leftovers
unhold_fifo

begin "stdout not read: --timeout still ends the job"
hold_fifo
run_t0=$(now_ms)
timeout -k 2 "$RUN_LIMIT" "$TMXRUN" -n 2 --timeout 2 sh -c "$LINES_THEN" "$MARK" 4000000 \
    >"$TMP/fifo" 2>"$TMP/err"
RC=$?
MS=$(($(now_ms) - run_t0))
expect_rc 124 "the timeout's status"
expect_faster 8000 "2 s, and the grace before SIGKILL"
expect_no_leftovers
unhold_fifo

begin "a slow reader gets every line, whole and in order"
timeout -k 2 "$RUN_LIMIT" "$TMXRUN" -n 3 --tag-output sh -c "$LINES_THEN" "$MARK" 1100000 \
    2>"$TMP/err" | { sleep 1; cat; } >"$TMP/out"
RC=${PIPESTATUS[0]}
expect_rc 0 "the ranks exit 0"
for r in 0 1 2; do
    n=$(grep -cx "\[$r\] 0123456789" "$TMP/out")
    [ "$n" -eq 100000 ] || fail "rank $r: $n whole lines of 100000"
done
n=$(grep -vcx '\[[012]\] 0123456789' "$TMP/out")
[ "$n" -eq 0 ] || fail "$n lines broken or mixed"

begin "stdin goes to rank 0, as mpirun's, whole however slowly it reads"
head -c 3000000 /dev/urandom >"$TMP/in"
want=$(md5sum <"$TMP/in")
timeout -k 2 "$RUN_LIMIT" "$TMXRUN" -n 3 -p sh -c 'sleep 0.5; md5sum' "$MARK" <"$TMP/in" \
    >"$TMP/out" 2>"$TMP/err"
RC=$?
expect_rc 0 "the ranks exit 0"
expect_line out "^\[0\] $want\$" "rank 0 read all of it"
expect_line out "^\[1\] d41d8cd98f00b204e9800998ecf8427e  -\$" "rank 1 read nothing"
expect_line out "^\[2\] d41d8cd98f00b204e9800998ecf8427e  -\$" "rank 2 read nothing"

begin "--stdin all: every rank reads all of it; --stdin 2: rank 2 alone"
timeout -k 2 "$RUN_LIMIT" "$TMXRUN" -n 3 -p --stdin all sh -c 'sleep 0.$TMX_RANK; md5sum' "$MARK" \
    <"$TMP/in" >"$TMP/out" 2>"$TMP/err"
RC=$?
expect_rc 0 "the ranks exit 0"
[ "$(grep -c "^\[[012]\] $want\$" "$TMP/out")" -eq 3 ] || fail "every rank should have read all of it"
printf 'one\ntwo\n' | timeout -k 2 "$RUN_LIMIT" "$TMXRUN" -n 3 -p --stdin 2 sh -c 'sed s/^/in:/' "$MARK" \
    >"$TMP/out" 2>"$TMP/err"
RC=$?
expect_rc 0 "the ranks exit 0"
[ "$(cat "$TMP/out")" = "$(printf '[2] in:one\n[2] in:two')" ] || fail "rank 2 alone should have read it"

begin "--stdin none leaves stdin unread; a rank that stops reading it does not hold the job"
{ timeout -k 2 "$RUN_LIMIT" "$TMXRUN" -n 2 --stdin none sh -c 'cat' "$MARK"; cat; } \
    <<<"left for the next" >"$TMP/out" 2>"$TMP/err"
expect_line out '^left for the next$' "tmxrun read none of it"
run_t0=$(now_ms)
yes | timeout -k 2 "$RUN_LIMIT" "$TMXRUN" -n 2 --stdin all sh -c 'head -c 10 >/dev/null; echo done' \
    "$MARK" >"$TMP/out" 2>"$TMP/err"
RC=${PIPESTATUS[1]}
MS=$(($(now_ms) - run_t0))
expect_rc 0 "the ranks exit 0 with endless input"
expect_faster 5000 "tmxrun ended with its ranks"
expect_usage "-n 2 --stdin 2 true" "-n 2 --stdin x true" "-n 2 --stdin -1 true" "-n 2 --stdin true"
expect_no_leftovers

begin "tmxrun killed by SIGKILL takes its ranks with it"
start_bg -n 3 "$KVS_RANK" --sleep 30 "$MARK"
if wait_for_procs 4; then
    kill -KILL "$BG_PID"
    wait "$BG_PID" 2>/dev/null
    BG_PID=""
    expect_no_leftovers
fi

finish
