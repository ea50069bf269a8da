#!/bin/bash
# Multi-host jobs of tmxrun (--hosts, --agent, --kvs-addr) and the tcp: form
# of its key-value service.
#   usage: tmxrun_hosts_test.sh PATH/TO/tmxrun PATH/TO/kvs_rank
# Most cases use an agent that needs no privileges: 'env -i ... {host}' runs
# every "host" here, with an emptied environment as ssh would give. As root,
# with ip netns working, the last cases run ranks in two network namespaces
# that reach tmxrun's service over veth pairs; otherwise they say why they
# are skipped. Every job carries a unique marker argument, so that pgrep can
# tell whether any of its processes outlived it. Exit status 0 only when
# every check that ran passed. The helpers it shares with tmxrun_test.sh
# are in tmxrun_lib.sh.
# shellcheck disable=SC2016 # $TMX_* in single quotes are the ranks' to expand
set -u
TEST_NAME=tmxrun_hosts_test
# shellcheck source-path=SCRIPTDIR source=tmxrun_lib.sh
. "$(dirname "$0")/tmxrun_lib.sh"

# The network namespaces, and the root side of their veth pairs (at most
# 15 characters), once created.
NS_A="tmxrt-$$-a"
NS_B="tmxrt-$$-b"
VETH_A="tmxrt$$a"
VETH_B="tmxrt$$b"
NETNS_MADE=0

# An agent that runs the rank here with nothing of tmxrun's environment but
# PATH, so that what a rank sees came through the command line.
AGENT="env -i PATH='$PATH' TMX_TEST_HOST={host}"

netns_delete() {
    [ "$NETNS_MADE" -eq 1 ] || return 0
    ip netns delete "$NS_A" 2>/dev/null
    ip netns delete "$NS_B" 2>/dev/null
    ip link delete "${VETH_A}r" 2>/dev/null
    ip link delete "${VETH_B}r" 2>/dev/null
    NETNS_MADE=0
}

cleanup_more() {
    netns_delete
}

# expect_sorted FILE EXPECTED WHY: FILE, sorted, is exactly EXPECTED.
expect_sorted() {
    if [ "$(sort "$TMP/$1")" = "$2" ]; then
        echo "   ok: $1 is as expected ($3)"
    else
        fail "$1 differs from the expected:"$'\n'"$2"$'\n'"($3)"
    fi
}

# ---------------------------------------------------------------- cases

begin "without --hosts nothing changes: local ranks, abstract socket, no TMX_HOST"
run -n 2 sh -c 'echo "${TMX_HOST-unset} $TMX_KVS"' "$MARK"
expect_rc 0 "the job succeeds"
expect_line out '^unset unix:@tmx-kvs-[0-9]+-[0-9a-f]+$' "as before"
expect_no_leftovers

begin "ranks go round-robin over the hosts, and the agent gets {host}"
run --hosts a,b -n 5 --agent "$AGENT" \
    sh -c 'echo "$TMX_RANK $TMX_SIZE $TMX_HOST $TMX_TEST_HOST"' "$MARK"
expect_rc 0 "the job succeeds"
expect_sorted out "0 5 a a
1 5 b b
2 5 a a
3 5 b b
4 5 a a" "rank r runs on host r % 2, and TMX_HOST says so"
expect_no_leftovers

begin "the ranks are told a tcp: address, the same for all"
run --hosts h1,h2,h3 -n 3 --agent "$AGENT" sh -c 'echo "$TMX_JOBID $TMX_KVS"' "$MARK"
expect_rc 0 "the job succeeds"
expect_line out '^[0-9a-f]{16} tcp:[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+:[0-9]+$' "TMX_KVS=tcp:IP:PORT"
if [ "$(sort -u "$TMP/out" | wc -l)" -eq 1 ]; then
    echo "   ok: every rank sees the same job id and address"
else
    fail "the ranks disagree on the job id or address"
fi
expect_no_leftovers

for n in 4 8; do
    begin "$n ranks on 2 hosts exchange values over the tcp: service"
    run --hosts a,b -n "$n" --agent "$AGENT" "$KVS_RANK" "$MARK"
    expect_rc 0 "every rank put, fenced, read and checked every other rank's values"
    expect_line out "^kvs_rank: $n ranks exchanged values\$" "rank 0 reports the exchange"
    expect_no_leftovers
done

begin "32 ranks on 3 hosts, --kvs-addr 127.0.0.1"
run --hosts x,y,z -n 32 --kvs-addr 127.0.0.1 --agent "$AGENT" \
    sh -c 'echo "$TMX_KVS" >&2; exec "$0" "$@"' "$KVS_RANK" "$MARK"
expect_rc 0 "the exchange works through the given address"
expect_line err '^tcp:127\.0\.0\.1:[0-9]+$' "--kvs-addr is what the ranks are told"
expect_no_leftovers

begin "a rank's exit status is tmxrun's, and the other ranks are stopped"
run --hosts a,b -n 4 --agent "$AGENT" "$KVS_RANK" --exit-rank 2 3 --sleep 30 "$MARK"
expect_rc 3 "rank 2 exited with 3"
expect_faster 5000 "the ranks sleeping 30 s were terminated, not waited for"
expect_line err 'rank 2 exited with status 3' "tmxrun says which rank failed"
expect_no_leftovers

begin "a rank killed by SIGKILL gives 137; the agent's pid is the rank's"
run --hosts a,b -n 3 --agent "$AGENT" "$KVS_RANK" --kill-rank 1 --sleep 30 "$MARK"
expect_rc 137 "128 + SIGKILL"
expect_line err 'rank 1 was killed by signal 9' "the agent exec'd the rank: tmxrun saw the signal"
expect_faster 5000 "the other ranks were terminated"
expect_no_leftovers

begin "a rank that exits 0 without fencing fails the others' fence"
run --hosts a,b -n 4 --agent "$AGENT" "$KVS_RANK" --leave-rank 3 "$MARK"
expect_rc 42 "the waiting ranks got ERR from FENCE over TCP"
expect_faster 5000 "nobody hung in the fence"
expect_no_leftovers

begin "--timeout stops agent-started ranks with 124"
run --hosts a,b -n 2 --timeout 1 --agent "$AGENT" "$KVS_RANK" --sleep 30 "$MARK"
expect_rc 124 "timeout"
expect_slower 900 "not before the timeout"
expect_faster 5000 "soon after the timeout"
expect_no_leftovers

begin "ranks that ignore SIGTERM get SIGKILL 2 s later"
run --hosts a,b -n 2 --timeout 0.5 --agent "$AGENT" "$KVS_RANK" --ignore-term --sleep 30 "$MARK"
expect_rc 124 "timeout"
expect_slower 2400 "SIGTERM first, then a 2 s grace"
expect_faster 7000 "then SIGKILL"
expect_no_leftovers

begin "tmxrun's TMX_* variables are forwarded, and only those"
TMX_TEST_FWD="two  words, 'single' \"double\" \$HOME \\ *" TMX_RANK=99 TMX_HOST=elsewhere \
    NOT_TMX_VAR=1 run --hosts a,b -n 2 --agent "$AGENT" \
    sh -c 'echo "$TMX_RANK $TMX_HOST <$TMX_TEST_FWD> <${NOT_TMX_VAR-unset}>"' "$MARK"
expect_rc 0 "the job succeeds"
expect_sorted out "0 a <two  words, 'single' \"double\" \$HOME \\ *> <unset>
1 b <two  words, 'single' \"double\" \$HOME \\ *> <unset>" \
    "the value arrives intact; tmxrun's own TMX_RANK and TMX_HOST win; others stay behind"
expect_no_leftovers

begin "arguments with spaces, quotes and shell characters arrive intact"
run --hosts a -n 1 --agent "$AGENT" sh -c 'for a; do printf "<%s>\n" "$a"; done' "$MARK" \
    'two words' "it's" '"dq"' '$HOME' 'back\slash' '*' '' ';' '|x' '~' 'a
b' '{host}'
expect_rc 0 "the job succeeds"
if [ "$(cat "$TMP/out")" = "<two words>
<it's>
<\"dq\">
<\$HOME>
<back\\slash>
<*>
<>
<;>
<|x>
<~>
<a
b>
<{host}>" ]; then
    echo "   ok: every argument arrived as given"
else
    fail "the arguments were mangled"
fi
expect_no_leftovers

begin "{cmd}: an agent that hands the command to a shell, as ssh does"
cat >"$TMP/fake-ssh" <<'EOF'
#!/bin/sh
# As ssh: joins the arguments after the host, and a shell runs the result.
host=$1
shift
exec env -i PATH="$PATH" TMX_TEST_HOST="$host" sh -c "$*"
EOF
chmod +x "$TMP/fake-ssh"
TMX_TEST_FWD="a 'b' \$c" run --hosts a,b -n 2 --agent "'$TMP/fake-ssh' {host} {cmd}" \
    sh -c 'printf "%s|%s|%s|" "$TMX_RANK" "$TMX_TEST_HOST" "$TMX_TEST_FWD"; printf "<%s>" "$@"; echo' \
    "$MARK" 'two words' "it's" '$HOME' ''
expect_rc 0 "the job succeeds"
expect_sorted out "0|a|a 'b' \$c|<two words><it's><\$HOME><>
1|b|a 'b' \$c|<two words><it's><\$HOME><>" "arguments and variables survive the second shell"
run --hosts a,b -n 2 --agent "'$TMP/fake-ssh' {host}" "$KVS_RANK" "$MARK"
expect_rc 0 "without {cmd}, a command of plain words needs no second quoting"
expect_line out '^kvs_rank: 2 ranks exchanged values$' "the ranks ran and exchanged"
expect_no_leftovers

begin "host names with spaces and quotes are quoted for the agent"
run --hosts "h one,h'two" -n 2 --agent "$AGENT" sh -c 'echo "$TMX_HOST|$TMX_TEST_HOST"' "$MARK"
expect_rc 0 "the job succeeds"
expect_sorted out "h one|h one
h'two|h'two" "{host} and TMX_HOST are the names as given"
expect_no_leftovers

begin "--tag-output works for agent-started ranks"
run --hosts a,b -n 2 -p --agent "$AGENT" sh -c 'echo "out$TMX_RANK"; echo "err$TMX_RANK" >&2' \
    "$MARK"
expect_rc 0 "the job succeeds"
expect_line out '^\[1\] out1$' "stdout is tagged"
expect_line err '^\[0\] err0$' "stderr is tagged"
expect_no_leftovers

begin "an agent that fails, or cannot be found"
run --hosts a,b -n 2 --agent 'false {host}' "$KVS_RANK" "$MARK"
expect_rc 1 "the agent's status is the rank's"
run --hosts a,b -n 2 --agent "$TMP/no-such-agent {host}" "$KVS_RANK" "$MARK"
expect_rc 127 "as a shell would"
expect_line err 'not found' "the shell says why"
expect_no_leftovers

begin "bad multi-host options give usage and exit 2"
expect_usage "--hosts a -n 1 true" "--hosts a --agent ssh -n 1 true" \
    "--agent ssh{host} -n 1 true" "--kvs-addr 127.0.0.1 -n 1 true" \
    "--hosts a --agent {host} --kvs-addr 1.2.3 -n 1 true" \
    "--hosts a --agent {host} --kvs-addr localhost -n 1 true" \
    "--hosts , --agent {host} -n 1 true" "--hosts a,,b --agent {host} -n 1 true" \
    "--hosts a, --agent {host} -n 1 true" "--hosts ,a --agent {host} -n 1 true" \
    "--hosts a --agent {host} -n 1 A=b" "--hosts a --agent {host} -n 1" "--hosts"
run --hosts "$(printf 'h%d,' $(seq 1 4097))x" --agent '{host}' -n 1 true
expect_rc 2 "more than 4096 hosts"
run --hosts a --agent "$AGENT" --kvs-addr 198.51.100.254 -n 1 true "$MARK"
expect_rc 125 "--kvs-addr must be an address of this host"
expect_line err 'cannot listen on TCP 198\.51\.100\.254' "tmxrun says why"

begin "Ctrl-C (SIGINT) to tmxrun stops agent-started ranks"
"$TMXRUN" --hosts a,b -n 3 --agent "$AGENT" "$KVS_RANK" --sleep 30 "$MARK" \
    >"$TMP/out" 2>"$TMP/err" &
BG_PID=$!
if wait_for_procs 4; then
    stop_bg INT
    expect_rc 130 "tmxrun got SIGINT"
    expect_faster 5000 "the ranks were terminated"
    expect_no_leftovers
fi

# ------------------------------------------------- network namespaces

# Picks a /24 in 198.18.0.0/15 (set aside for network tests) that no route
# here uses yet; sets NET to its first three octets.
pick_net() {
    local i n
    for i in $(seq 0 255); do
        n="198.$((18 + ($$ + i) / 256 % 2)).$((($$ + i) % 256))"
        if ! ip -4 route show table all | grep -q "$n\."; then
            NET=$n
            return 0
        fi
    done
    return 1
}

# Two namespaces, each joined to the root namespace by a veth pair:
#   root ${VETH_A}r NET.1/30 <-> NET.2/30 in NS_A, default route via NET.1
#   root ${VETH_B}r NET.5/30 <-> NET.6/30 in NS_B, default route via NET.5
# The root namespace delivers anything addressed to one of its addresses,
# so both namespaces reach NET.1 (and the root's other addresses) with no
# forwarding. Returns 1 with SKIP_WHY set when this host cannot do it.
netns_setup() {
    if [ "$(id -u)" -ne 0 ]; then
        SKIP_WHY="not running as root"
        return 1
    fi
    if ! command -v ip >/dev/null; then
        SKIP_WHY="no ip command (iproute2)"
        return 1
    fi
    if ! pick_net; then
        SKIP_WHY="no free /24 in 198.18.0.0/15"
        return 1
    fi
    if ! ip netns add "$NS_A" 2>"$TMP/netns.err"; then
        SKIP_WHY="ip netns add fails: $(cat "$TMP/netns.err")"
        return 1
    fi
    NETNS_MADE=1
    if ! netns_link "$NS_A" "$VETH_A" 1 2>>"$TMP/netns.err" ||
        ! ip netns add "$NS_B" 2>>"$TMP/netns.err" ||
        ! netns_link "$NS_B" "$VETH_B" 5 2>>"$TMP/netns.err"; then
        SKIP_WHY="cannot set up the namespaces' veth pairs: $(tr '\n' ' ' <"$TMP/netns.err")"
        netns_delete
        return 1
    fi
    return 0
}

# netns_link NS VETH N: root side VETH"r" gets NET.N, the NS side NET.(N+1).
netns_link() {
    ip link add "${2}r" type veth peer name "${2}n" &&
        ip link set "${2}n" netns "$1" &&
        ip addr add "$NET.$3/30" dev "${2}r" &&
        ip link set "${2}r" up &&
        ip netns exec "$1" ip link set lo up &&
        netns_link_up "$1" "$2" "$3"
}

netns_link_up() {
    ip netns exec "$1" ip addr replace "$NET.$(($3 + 1))/30" dev "${2}n" &&
        ip netns exec "$1" ip link set "${2}n" up &&
        ip netns exec "$1" ip route replace default via "$NET.$3"
}

begin "network namespaces as hosts (ip netns exec)"
SKIP_WHY=""
if ! netns_setup; then
    echo "   SKIPPED: $SKIP_WHY"
else
    echo "   namespaces $NS_A ($NET.2) and $NS_B ($NET.6), service at $NET.1"
    run --hosts "$NS_A,$NS_B" --agent 'ip netns exec {host}' --kvs-addr "$NET.1" -n 4 \
        sh -c 'echo "$TMX_RANK $TMX_HOST $(ip -4 -o addr show scope global | grep -o "inet [0-9.]*")"' \
        "$MARK"
    expect_rc 0 "the ranks ran"
    expect_sorted out "0 $NS_A inet $NET.2
1 $NS_B inet $NET.6
2 $NS_A inet $NET.2
3 $NS_B inet $NET.6" "each rank ran in its host's namespace, seeing only its address"

    begin "network namespaces: 8 ranks exchange values through $NET.1"
    run --hosts "$NS_A,$NS_B" --agent 'ip netns exec {host}' --kvs-addr "$NET.1" -n 8 \
        "$KVS_RANK" "$MARK"
    expect_rc 0 "the exchange crossed the veth pairs"
    expect_line out '^kvs_rank: 8 ranks exchanged values$' "rank 0 reports the exchange"
    expect_no_leftovers

    begin "network namespaces: the advertised address by default"
    run --hosts "$NS_A,$NS_B" --agent 'ip netns exec {host}' -n 4 \
        sh -c 'echo "$TMX_KVS" >&2; exec "$0" "$@"' "$KVS_RANK" "$MARK"
    expect_rc 0 "the namespaces reach the address tmxrun picked"
    expect_line err '^tcp:[0-9.]+:[0-9]+$' "the ranks were told a tcp: address"
    expect_no_line err '^tcp:127\.' "not loopback, which a namespace cannot reach"
    expect_line out '^kvs_rank: 4 ranks exchanged values$' "rank 0 reports the exchange"
    expect_no_leftovers

    begin "network namespaces: a failing rank stops the others; --timeout"
    run --hosts "$NS_A,$NS_B" --agent 'ip netns exec {host}' --kvs-addr "$NET.1" -n 4 \
        "$KVS_RANK" --exit-rank 1 7 --sleep 30 "$MARK"
    expect_rc 7 "rank 1 (in $NS_B) exited with 7"
    expect_faster 5000 "the ranks in both namespaces were terminated"
    expect_no_leftovers
    run --hosts "$NS_A,$NS_B" --agent 'ip netns exec {host}' --kvs-addr "$NET.1" -n 2 \
        --timeout 1 "$KVS_RANK" --sleep 30 "$MARK"
    expect_rc 124 "timeout"
    expect_faster 5000 "soon after the timeout"
    expect_no_leftovers

    begin "network namespaces: a link that comes up late (connect retries)"
    ip netns exec "$NS_B" ip link set "${VETH_B}n" down
    t0=$(now_ms)
    timeout -k 2 "$RUN_LIMIT" "$TMXRUN" --hosts "$NS_A,$NS_B" --agent 'ip netns exec {host}' \
        --kvs-addr "$NET.1" -n 4 "$KVS_RANK" "$MARK" >"$TMP/out" 2>"$TMP/err" &
    BG_PID=$!
    sleep 1
    netns_link_up "$NS_B" "$VETH_B" 5 2>>"$TMP/err"
    wait "$BG_PID"
    RC=$?
    MS=$(($(now_ms) - t0))
    BG_PID=""
    expect_rc 0 "the ranks in $NS_B connected once their link was up"
    expect_slower 900 "they did wait for it"
    expect_no_leftovers
    begin "network namespaces: no default route; tmxrun advertises the address on the route to them"
    # As test hosts often are: only their own subnet routes. The machine's
    # first address is then unreachable from NS_A, and the service must be
    # advertised at NET.1 (learnt through the agent: hostname -I there).
    ip netns exec "$NS_A" ip route del default 2>>"$TMP/err"
    run --hosts "$NS_A" --agent 'ip netns exec {host}' -n 2 \
        sh -c 'echo "$TMX_KVS" >&2; exec "$0" "$@"' "$KVS_RANK" "$MARK"
    expect_rc 0 "the ranks reached the service"
    expect_line err "^tcp:$NET\.1:[0-9]+\$" "advertised at $NET.1, on the route to $NS_A"
    expect_line out '^kvs_rank: 2 ranks exchanged values$' "rank 0 reports the exchange"
    expect_no_leftovers

    netns_delete
    if ip netns list | grep -q "^tmxrt-$$-"; then
        fail "namespaces left behind: $(ip netns list | grep "^tmxrt-$$-" | tr '\n' ' ')"
    else
        echo "   ok: the namespaces are gone"
    fi
fi

finish
if [ -n "$SKIP_WHY" ]; then
    echo "$TEST_NAME: SKIPPED (exit 77) the network-namespace cases: $SKIP_WHY"
    exit 77
fi
