#!/bin/bash
# Debian's fi_info lists the tmx provider with the attributes it promises.
# Environment: FI_PROVIDER_PATH names the directory of libtmx-fi.so.
set -u
fail() { echo "FAIL: $*"; exit 1; }
command -v fi_info >/dev/null || { echo "fi_info not installed (libfabric-bin): skipped"; exit 77; }
run() { timeout 60 fi_info "$@" 2>&1; }

out=$(run -p tmx) || fail "fi_info -p tmx: $out"
echo "$out"
grep -q 'provider: tmx' <<<"$out" || fail "provider not listed"
grep -q 'type: FI_EP_RDM' <<<"$out" || fail "no FI_EP_RDM"

v=$(run -p tmx -v) || fail "fi_info -p tmx -v: $v"
for want in FI_TAGGED FI_MSG FI_SEND FI_RECV FI_DIRECTED_RECV FI_SOURCE FI_REMOTE_CQ_DATA \
            FI_LOCAL_COMM FI_REMOTE_COMM 'cq_data_size: 8' 'inject_size: 4096' \
            'threading: FI_THREAD_SAFE' 'data_progress: FI_PROGRESS_MANUAL' \
            'resource_mgmt: FI_RM_ENABLED' 'msg_order: \[ FI_ORDER_SAS \]' \
            'mem_tag_format: 0x5555555555555555' 'max_msg_size: 1099511627776' \
            'prov_name: tmx' 'iov_limit: 1'; do
    grep -q -- "$want" <<<"$v" || fail "verbose listing lacks '$want'"
done
grep -q 'FI_RMA\|FI_ATOMIC\|FI_MULTI_RECV' <<<"$v" && fail "claims RMA, atomics or multi-recv"

# Tagged only: all 64 tag bits are the application's.
t=$(run -p tmx -c FI_TAGGED -v) || fail "fi_info -c FI_TAGGED: $t"
grep -q 'mem_tag_format: 0xaaaaaaaaaaaaaaaa' <<<"$t" || fail "tagged-only tag format"
grep -q 'FI_MSG' <<<"$t" && fail "tagged-only listing offers FI_MSG"

# What it cannot do it refuses.
run -p tmx -t FI_EP_MSG >/dev/null && fail "offers FI_EP_MSG"
run -p tmx -c FI_RMA >/dev/null && fail "offers FI_RMA"
echo "fi_info: ok"
