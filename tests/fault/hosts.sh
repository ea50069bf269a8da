# Test hosts made of network namespaces, for the fault tests (sourced).
# fault_hosts_up N makes hosts $FAULT_PREFIX-h1..hN, each with one veth
# into a bridge in the root namespace (10.213.X.0/24, the root side .254),
# and sets FAULT_HOSTS (comma list) and FAULT_KVS (the root side's address).
# fault_hosts_down removes everything, killing what still runs inside.

FAULT_PREFIX="tmxf$$"
FAULT_NET="10.213.$(( $$ % 200 + 20 ))"
FAULT_BR="${FAULT_PREFIX}br"

fault_hosts_down() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${FAULT_PREFIX}-" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    ip link del "$FAULT_BR" 2>/dev/null || true
}

fault_hosts_up() {
    local n="$1" i ns hosts=""
    ip link add "$FAULT_BR" type bridge
    ip addr add "$FAULT_NET.254/24" dev "$FAULT_BR"
    ip link set "$FAULT_BR" up
    for i in $(seq 1 "$n"); do
        ns="${FAULT_PREFIX}-h$i"
        ip netns add "$ns"
        ip link add "${FAULT_PREFIX}v$i" type veth peer name eth0 netns "$ns"
        ip link set "${FAULT_PREFIX}v$i" master "$FAULT_BR" up
        ip -n "$ns" addr add "$FAULT_NET.$i/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        hosts="$hosts${hosts:+,}$ns"
    done
    FAULT_HOSTS="$hosts"
    FAULT_KVS="$FAULT_NET.254"
}

# fault_nft_drop NS PERCENT: the kernel drops PERCENT % of the UDP datagrams
# the host sends (TCP, the launcher's service, is spared).
fault_nft_drop() {
    ip netns exec "$1" nft -f - <<NFT
table inet tmxfault {
    chain out {
        type filter hook output priority 0; policy accept;
        meta l4proto udp numgen random mod 100 < $2 drop
    }
}
NFT
}

fault_nft_clear() {
    ip netns exec "$1" nft delete table inet tmxfault 2>/dev/null || true
}
