# Test hosts made of network namespaces (sourced by the fault tests and by
# bench/udp.sh). fault_hosts_up N makes hosts $FAULT_PREFIX-h1..hN, each
# with one veth (eth0) into a bridge in the root namespace on a free
# 10.213-214.X.0/24 (host i at .i, the root side at .254), waits until they
# reach each other, and sets FAULT_HOSTS (comma list) and FAULT_KVS (the
# root side's address). fault_hosts_down removes everything, killing what
# still runs inside. Set FAULT_PREFIX before sourcing to choose the names.

FAULT_PREFIX="${FAULT_PREFIX:-tmxf$$}"
FAULT_BR="${FAULT_PREFIX}br"

# A /24 that no route or address of this machine uses yet.
fault_free_net() {
    local in_use k x net
    in_use="$(ip -4 route show) $(ip -4 addr show)"
    for k in $(seq 0 399); do
        x=$((($$ + k) % 200 + 20))
        net="10.$((213 + k / 200)).$x"
        if ! grep -q "${net//./\\.}\\." <<<"$in_use"; then
            echo "$net"
            return 0
        fi
    done
    return 1
}
FAULT_NET="$(fault_free_net)" || { echo "hosts.sh: no free 10.213-214.X.0/24 subnet" >&2; return 1; }
FAULT_KVS="$FAULT_NET.254"

fault_hosts_down() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${FAULT_PREFIX}-" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    ip link del "$FAULT_BR" 2>/dev/null || true
}

# Waits until host N reaches host 1: a TCP connect to a closed port that is
# refused got there.
fault_hosts_wait() {
    local out i
    for i in $(seq 50); do
        out=$(ip netns exec "${FAULT_PREFIX}-h$1" timeout 1 bash -c "exec 3<>/dev/tcp/$FAULT_NET.1/9" 2>&1 || true)
        case "$out" in *refused*) return 0 ;; esac
        sleep 0.1
    done
    echo "hosts.sh: host $1 cannot reach host 1 ($FAULT_NET.1)" >&2
    return 1
}

fault_hosts_up() {
    local n="$1" i ns hosts=""
    ip link add "$FAULT_BR" type bridge || return 1
    ip addr add "$FAULT_KVS/24" dev "$FAULT_BR"
    ip link set "$FAULT_BR" up
    for i in $(seq 1 "$n"); do
        ns="${FAULT_PREFIX}-h$i"
        ip netns add "$ns" || return 1
        ip link add "${FAULT_PREFIX}v$i" type veth peer name eth0 netns "$ns" || return 1
        ip link set "${FAULT_PREFIX}v$i" master "$FAULT_BR" up
        ip -n "$ns" addr add "$FAULT_NET.$i/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        hosts="$hosts${hosts:+,}$ns"
    done
    FAULT_HOSTS="$hosts"
    for i in $(seq 2 "$n"); do
        fault_hosts_wait "$i" || return 1
    done
}

# fault_nft_drop NS PERCENT: the kernel drops PERCENT % of the UDP datagrams
# the host sends (TCP, the launcher's service, is spared), counting all UDP
# datagrams and the dropped ones.
fault_nft_drop() {
    ip netns exec "$1" nft -f - <<NFT
table inet tmxfault {
    chain out {
        type filter hook output priority 0; policy accept;
        meta l4proto udp counter
        meta l4proto udp numgen random mod 100 < $2 counter drop
    }
}
NFT
}

fault_nft_clear() {
    ip netns exec "$1" nft delete table inet tmxfault 2>/dev/null || true
}

# fault_nft_counts NS: "udp_sent dropped" since fault_nft_drop.
fault_nft_counts() {
    ip netns exec "$1" nft list table inet tmxfault 2>/dev/null |
        awk '/counter packets/ { for (i = 1; i <= NF; i++) if ($i == "packets") v[++n] = $(i + 1) }
             END { printf "%d %d\n", v[1], v[2] }'
}

# fault_bulk_watch NS DST: from now on the kernel of host NS collects, in
# an nft set, the source ports of its bulk UDP data to address DST (sends
# of several datagrams at once, GSO: longer than a datagram where the
# output hook sees them). 1 if nft refused.
fault_bulk_watch() {
    ip netns exec "$1" nft delete table inet tmxbulk 2>/dev/null || true
    ip netns exec "$1" nft -f - <<NFT
table inet tmxbulk {
    set bulk { type inet_service; flags dynamic; size 65535; }
    chain out {
        type filter hook output priority 0; policy accept;
        ip daddr $2 meta l4proto udp meta length > 1600 add @bulk { udp sport }
    }
}
NFT
}

# fault_bulk_ports NS: how many source ports fault_bulk_watch saw; ends
# the watch.
fault_bulk_ports() {
    ip netns exec "$1" nft list set inet tmxbulk bulk 2>/dev/null | tr -d '\n' |
        sed -n 's/.*elements = {\([^}]*\)}.*/\1/p' | tr ',' '\n' | grep -c '[0-9]'
    ip netns exec "$1" nft delete table inet tmxbulk 2>/dev/null
    return 0
}

# fault_host_ip NS: host NS's address on the test network.
fault_host_ip() {
    ip netns exec "$1" ip -4 -o addr show dev eth0 | awk '{ print $4 }' | cut -d/ -f1
}
