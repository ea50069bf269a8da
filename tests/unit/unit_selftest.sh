#!/bin/sh
# The runner itself: every misbehaving case named, the passing one run,
# one case runnable alone, an unknown name refused.
#   usage: unit_selftest.sh UNIT_SELFTEST
set -u
bin="$1"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
fail() { echo "unit_selftest: $*"; cat "$out"; exit 1; }

TMX_TEST_CASE_TIMEOUT=2 "$bin" >"$out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "whole suite exited $rc, not 1"
grep -q 'FAILED  \] crashes' "$out" || fail "the crash is not named"
grep -q 'CRASHED \] dies: killed by signal 9' "$out" || fail "the killed case is not named"
grep -q 'TIMEOUT \] hangs: still running after 2 s' "$out" || fail "the hang is not named"
grep -q 'FAILED  \] fails' "$out" || fail "the failure is not named"
grep -q 'skipped: on purpose' "$out" || fail "the skip does not say why"
grep -q 'OK \] passes' "$out" || fail "the passing case did not run after the others"
grep -q '1 passed, 4 failed, 1 skipped' "$out" || fail "wrong summary"

"$bin" passes >"$out" 2>&1 || fail "one passing case alone exited $?"
grep -q 'crashes' "$out" && fail "a case not named ran"
"$bin" skips >"$out" 2>&1
[ $? -eq 77 ] || fail "a suite of skipped cases does not exit 77"
"$bin" nosuchcase >"$out" 2>&1
[ $? -eq 2 ] || fail "an unknown case name is not refused"
[ "$("$bin" --list | wc -l)" -eq 6 ] || fail "--list does not list the six cases"
echo "unit_selftest: the runner names crashes, hangs and failures and runs one case alone"
