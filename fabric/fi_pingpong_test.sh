#!/bin/bash
# Debian's fi_pingpong over the tmx provider: server and client on this
# host, RDM endpoints, untagged and tagged, payloads checked (-c).
# Environment: FI_PROVIDER_PATH names the directory of libtmx-fi.so.
set -u
command -v fi_pingpong >/dev/null || { echo "fi_pingpong not installed (libfabric-bin): skipped"; exit 77; }
tmp=$(mktemp -d)
server=""
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

# fi_pingpong needs a TCP port for its own control channel.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
        echo $((20000 + RANDOM % 20000))
}

run_pair() {
    local mode=$1 port
    port=$(free_port)
    timeout 120 fi_pingpong -p tmx -e rdm -m "$mode" -B "$port" -I 200 -c >"$tmp/server" 2>&1 &
    server=$!
    # the client gives up at once if the server is not listening yet
    for _ in $(seq 100); do
        ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
        sleep 0.1
    done
    if ! timeout 120 fi_pingpong -p tmx -e rdm -m "$mode" -P "$port" -I 200 -c 127.0.0.1 >"$tmp/client" 2>&1; then
        echo "FAIL: client ($mode)"; cat "$tmp/client"; echo "--- server"; cat "$tmp/server"; exit 1
    fi
    if ! wait "$server"; then
        server=""
        echo "FAIL: server ($mode)"; cat "$tmp/server"; exit 1
    fi
    server=""
    cat "$tmp/client"
    grep -q '^1m ' "$tmp/client" || { echo "FAIL: no 1 MiB result ($mode)"; exit 1; }
}

run_pair msg
run_pair tagged
echo "fi_pingpong: ok"
