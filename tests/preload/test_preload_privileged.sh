#!/usr/bin/env bash
# The preload in a privileged process (label tcp; usmc_run(1), ENVIRONMENT):
# a set-group-ID copy of preload_privileged (linked with libusmc-preload.so:
# a privileged process ignores LD_PRELOAD from a build tree), run by root,
# is AT_SECURE (its group is not its caller's) and must ignore
# USMC_RUN_LOG (its file is not created), USMC_RUN_VERBOSE (no line on
# stderr) and USMC_PRELOAD_TEST_GATE (no gate). The same program without
# the bit must honour them (so that the test can fail): the file is created
# rw-r--r-- under umask 0 with the connections' lines, the lines go to
# stderr without it, the connect in progress is the gate. And USMC_RUN_LOG
# naming a symlink is refused, its target not created.
#
# Needs root and a temporary directory on a mount without nosuid; skips (77)
# if not.
#
# Usage: test_preload_privileged.sh <preload_privileged>
set -euo pipefail
PROG=${1:?preload_privileged}
NOGROUP=65534
# shellcheck source=../common/privileged.sh
. "$(dirname "$0")/../common/privileged.sh"

privileged_tmp set-group-ID
cp "$PROG" "$tmp/sgid"
chgrp $NOGROUP "$tmp/sgid"
chmod 2755 "$tmp/sgid"
cp "$PROG" "$tmp/plain"
chmod 0755 "$tmp/plain"

# run ENV... PROGRAM: with umask 0 and the preload's variables; its output
# in $tmp/out and $tmp/err
run() {
	local rc=0
	sh -c 'umask 0 && exec env "$@"' sh USMC_KERNEL_COMPAT=0 USMC_RUN_VERBOSE=2 \
		USMC_PRELOAD_TEST_GATE=1 USMC_RUN_SMC_PEERS=127.0.0.1 "$@" \
		>"$tmp/out" 2>"$tmp/err" || rc=$?
	echo "  exit $rc: $(cat "$tmp/out") ($(grep -c 'usmc_run\[' "$tmp/err") lines on stderr)"
	[ $rc = 0 ] || fail "$*: exit $rc: $(cat "$tmp/err")"
}

echo "--- set-group-ID, run by root, umask 0"
run USMC_RUN_LOG="$tmp/log" "$tmp/sgid"
grep -q '^secure=1 ' "$tmp/out" || fail "not run with AT_SECURE"
[ ! -e "$tmp/log" ] || fail "USMC_RUN_LOG's file was created by the privileged process"
grep -q ' gate=0$' "$tmp/out" || fail "USMC_PRELOAD_TEST_GATE was honoured"
run "$tmp/sgid"
! grep -q 'usmc_run\[' "$tmp/err" || fail "USMC_RUN_VERBOSE was honoured: $(cat "$tmp/err")"

echo "--- the same program without the set-group-ID bit"
run USMC_RUN_LOG="$tmp/log" "$tmp/plain"
grep -q '^secure=0 gate=1$' "$tmp/out" || fail "USMC_PRELOAD_TEST_GATE not honoured unprivileged"
created_0644 "$tmp/log" USMC_RUN_LOG
grep -q ': fd [0-9]* connected 127.0.0.1:' "$tmp/log" || fail "no -vv line in USMC_RUN_LOG"
run "$tmp/plain"
grep -q ': fd [0-9]* connected 127.0.0.1:' "$tmp/err" || fail "USMC_RUN_VERBOSE not honoured"

echo "--- USMC_RUN_LOG naming a symlink"
ln -s "$tmp/target" "$tmp/link"
run USMC_RUN_LOG="$tmp/link" "$tmp/plain"
[ ! -e "$tmp/target" ] || fail "USMC_RUN_LOG followed a symlink and created its target"

privileged_end "a privileged process's preload ignores USMC_RUN_LOG, USMC_RUN_VERBOSE," \
	"USMC_PRELOAD_TEST_GATE"
