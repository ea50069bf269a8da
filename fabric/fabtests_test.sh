#!/bin/bash
# libfabric's conformance suite (fabtests) over the tmx provider: every
# test that fits the provider's capabilities, client and server on this
# host, in the default mode (the client names the server's address and
# port, exchanged in band) and with -E (addresses exchanged over a TCP
# socket), payloads checked where the test can (-v). A test the provider
# cannot run must be refused by fi_getinfo (exit code FI_ENODATA: notrun);
# any other failure, or a run past its time limit, fails this test.
#
# Environment: FI_PROVIDER_PATH names the directory of libtmx-fi.so;
# FABTESTS_BIN the fabtests' bin/ (scripts/fabtests_build.sh builds it
# in the unpacked sources, whose test_configs/ fi_rdm_stress reads).
# FABTESTS_TIME (seconds, default 30) limits each run; FABTESTS_QUICK=1
# runs the in-band mode of the first few tests only (sanitizer builds).
set -u
bin=${FABTESTS_BIN:-}
limit=${FABTESTS_TIME:-30}
quick=${FABTESTS_QUICK:-0}
[ -n "$bin" ] && [ -x "$bin/fi_rdm_tagged_pingpong" ] || {
    echo "fabtests not built (scripts/fabtests_build.sh, needs ../shared/conformance): skipped"
    exit 77
}
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

# FI_ENODATA as the tests exit with it: 61, or -61 & 255 from those that
# return fi_getinfo's result from main.
readonly ENODATA=61 ENODATA_NEG=195
refused() { [ "$1" -eq $ENODATA ] || [ "$1" -eq $ENODATA_NEG ]; }
pass=0 notrun=0 fail=0
table=""

# Ports: a base per run of this script, then one pair per test.
base=$((10000 + ($$ % 1000) * 20))
port=$base
next_port() { port=$((port + 1)); }

record() { # name mode result
    table+=$(printf '%-44s %-6s %s' "$1" "$2" "$3")$'\n'
    case $3 in
    pass*) pass=$((pass + 1)) ;;
    notrun*) notrun=$((notrun + 1)) ;;
    *) fail=$((fail + 1)) ;;
    esac
}

verdict() { # exit codes of server and client (or one process) -> result
    local r
    for r in "$@"; do
        { [ "$r" -eq 124 ] || [ "$r" -eq 137 ]; } && { echo "timeout"; return; }
    done
    for r in "$@"; do
        [ "$r" -ne 0 ] && ! refused "$r" && { echo "fail($*)"; return; }
    done
    for r in "$@"; do
        refused "$r" && { echo notrun; return; }
    done
    echo pass
}

show_logs() {
    echo "---- $1: server"; tail -n 20 "$tmp/s"
    echo "---- $1: client"; tail -n 20 "$tmp/c"
}

# Waits until the server listens: its name socket (UDP) in band, its
# address exchange socket (TCP) with -E; in band, tests that synchronize
# over TCP (fi_multi_recv, fi_av_xfer...) listen first on fabtests'
# default port, 3000. A server that exits first (refused by fi_getinfo)
# ends the wait.
readonly OOB_DEFAULT_PORT=3000
wait_listen() { # proto port pid
    for _ in $(seq 200); do
        ss -Hln"$1" "sport = :$2" 2>/dev/null | grep -q . && return
        [ "$1" = u ] && ss -Hlnt "sport = :$OOB_DEFAULT_PORT" 2>/dev/null | grep -q . && return
        kill -0 "$3" 2>/dev/null || return
        sleep 0.05
    done
}

run_pair_once() { # mode test args...
    local mode=$1 t=$2 sp cp sargs cargs spid s c proto
    shift 2
    next_port; sp=$port
    next_port; cp=$port
    if [ "$mode" = oob ]; then
        next_port
        sargs=(-E="$sp" -B "$cp")
        cargs=(-E="$sp" -B "$port")
        proto=t
    else
        sargs=(-B "$sp")
        cargs=(-P "$sp")
        proto=u
    fi
    timeout -k 5 "$limit" "$bin/$t" -p tmx "${sargs[@]}" "$@" >"$tmp/s" 2>&1 &
    spid=$!
    pids=("$spid")
    wait_listen "$proto" "$sp" "$spid"
    timeout -k 5 "$limit" "$bin/$t" -p tmx "${cargs[@]}" "$@" 127.0.0.1 >"$tmp/c" 2>&1
    c=$?
    # a refused client leaves its server waiting for it
    if refused $c; then
        kill "$spid" 2>/dev/null
        wait "$spid" 2>/dev/null
        s=$c
    else
        wait "$spid"
        s=$?
    fi
    pids=()
    res=$(verdict "$s" "$c")
}

# A run past its time limit is tried once more (the machine may be busy),
# and says so; a second one fails.
run_pair() { # mode test args...
    local res note=""
    run_pair_once "$@"
    if [ "$res" = timeout ]; then
        show_logs "$2 ${*:3} ($1), first try"
        note=" (after a timeout)"
        run_pair_once "$@"
    fi
    record "$2 ${*:3}" "$1" "$res$note"
    [ "$res" = pass ] || [ "$res" = notrun ] || show_logs "$2 ${*:3} ($1)"
}

run_one() { # test args...
    local t=$1 r res
    shift
    timeout -k 5 "$limit" "$bin/$t" -p tmx "$@" >"$tmp/c" 2>&1
    r=$?
    res=$(verdict "$r")
    record "$t $*" "-" "$res"
    [ "$res" = pass ] || [ "$res" = notrun ] || { echo "---- $t $*"; tail -n 30 "$tmp/c"; }
}

# Client-server tests: those of runfabtests.sh that have an RDM variant
# or need no endpoint type, with the options it gives them. "@inband":
# the test has no out-of-band mode (fi_poll never opens the -E socket).
pairs=(
    "fi_rdm_tagged_pingpong -I 50 -v"
    "fi_rdm_tagged_pingpong -I 50 -v -c fd"
    "fi_rdm_tagged_bw -I 50 -v"
    "fi_rdm_pingpong -I 50 -v"
    "fi_rdm_pingpong -I 50 -v -k"
    "fi_rdm_pingpong -I 50 -v -U"
    "fi_rdm"
    "fi_rdm -U"
    "fi_rdm_tagged_peek"
    "fi_rdm_shared_av"
    "fi_rdm_multi_client -C 4 -I 5"
    "fi_rdm_deferred_wq"
    "fi_rdm_atomic -I 5 -o all"
    "fi_rdm_cntr_pingpong -I 5"
    "fi_rdm_rma_event"
    "fi_rdm_rma_trigger"
    "fi_rma_bw -e rdm -o write -I 5"
    "fi_av_xfer -e rdm"
    "fi_cq_data -e rdm"
    "fi_multi_ep -e rdm -v"
    "fi_multi_mr -e rdm -V"
    "fi_multi_recv -e rdm -I 5"
    "fi_multi_recv -e rdm -M -v -I 100"
    "fi_multi_recv -e rdm -v -S 65536 -I 50"
    "fi_recv_cancel -e rdm -V"
    "fi_unexpected_msg -e rdm -I 10"
    "fi_msg_inject -e rdm -A inject -v"
    "fi_msg_inject -e rdm -N -A inject -v"
    "fi_msg_inject -e rdm -A inj_complete -v"
    "fi_bw -e rdm -v -T 1"
    "fi_bw -e rdm -v -T 1 -U"
    "@inband fi_poll -t queue"
    "@inband fi_poll -t counter"
    "fi_scalable_ep"
    "fi_shared_ctx"
    "fi_rdm_stress -u $bin/../../test_configs/rdm_stress/stress.json"
    "fi_msg_pingpong -I 5 -v"
    "fi_dgram_pingpong -I 5"
)
singles=(
    "fi_getinfo_test"
    "fi_getinfo_test -s 127.0.0.1 127.0.0.1"
    "fi_av_test -g 127.0.0.1 -n 1 -s 127.0.0.1 -e rdm"
    "fi_dom_test -n 2"
    "fi_eq_test"
    "fi_cq_test"
    "fi_mr_test"
    "fi_cntr_test"
    "fi_loopback"
)

start=$(date +%s)
modes=(inband oob)
if [ "$quick" = 1 ]; then
    pairs=("${pairs[@]:0:8}")
    singles=("${singles[@]:0:2}")
    modes=(inband)
fi
for p in "${pairs[@]}"; do
    for mode in "${modes[@]}"; do
        q=$p
        case $p in
        @inband\ *) [ "$mode" = inband ] || continue; q=${p#@inband } ;;
        esac
        # shellcheck disable=SC2086
        run_pair "$mode" $q
    done
done
for p in "${singles[@]}"; do
    # shellcheck disable=SC2086
    run_one $p
done

# fi_ubertest, the combinations of runfabtests.sh's complex set: the
# configuration beside this script names every send call, AV type and
# completion kind, and the CQ and EQ wait objects, that the provider
# offers, so that a combination refused (ENODATA, ENOSYS), skipped or
# failed counts as a failure here.
run_uber() {
    local cfg=$1 s c res q
    next_port; q=$port  # the control connection
    next_port           # the data: the server binds it for every combination
    timeout -k 5 $((limit * 10)) "$bin/fi_ubertest" -q "$q" -x >"$tmp/s" 2>&1 &
    pids=($!)
    wait_listen t "$q" "${pids[0]}"
    timeout -k 5 $((limit * 10)) "$bin/fi_ubertest" -q "$q" -P "$port" -u "$cfg" 127.0.0.1 >"$tmp/c" 2>&1
    c=$?
    [ "$c" -eq 0 ] || kill "${pids[0]}" 2>/dev/null # the server would wait for it
    wait "${pids[0]}"
    s=$?
    pids=()
    # ubertest exits 0 after a combination that failed on the client's
    # side only: its counts decide
    if [ "$c" -eq 0 ] && [ "$s" -eq 0 ] && grep -q '^Success: [1-9]' "$tmp/c" && grep -q '^Skipped: 0$' "$tmp/c" &&
        grep -q '^ENODATA: 0$' "$tmp/c" && grep -q '^ENOSYS : 0$' "$tmp/c" && grep -q '^EIO    : 0$' "$tmp/c" &&
        grep -q '^ERROR  : 0$' "$tmp/c"; then
        res=pass
    elif [ "$c" -ne 0 ] && [ "$c" -ne 124 ] && [ "$c" -ne 137 ]; then
        res="fail (client exit status $c)"
    else
        res=$(verdict "$s" "$c")
        [ "$res" != pass ] && [ "$res" != notrun ] || res="fail (combinations failed, skipped or refused)"
    fi
    record "fi_ubertest $(basename "$cfg")" "-" "$res"
    [ "$res" = pass ] || { show_logs fi_ubertest; grep -E '^(Success|Skipped|ENODATA|ENOSYS|EIO|ERROR)' "$tmp/c"; }
}
[ "$quick" = 1 ] || run_uber "$(cd "$(dirname "$0")" && pwd)/fabtests_uber.test"
printf '%-44s %-6s %s\n' test mode result
printf '%s' "$table"
echo "fabtests: $pass passed, $notrun not run (refused by fi_getinfo), $fail failed, $(($(date +%s) - start)) s"
[ $fail -eq 0 ]
