#!/usr/bin/env bash
# libusmc in a privileged process (label tcp; man usmc(7), SECURITY):
# a set-user-ID root copy of privileged_ctx, run by nobody with umask 0,
# must ignore the variables that name a file or a cgroup or ask for a
# privilege: USMC_LOG's file is not created, kernel-compat is off whatever
# USMC_KERNEL_COMPAT says (=1 with a cgroup that does not exist would make
# usmc_ctx_create() fail if the attach were tried), USMC_RMB_SIZE (pinned
# memory) keeps its default; a tuning value (USMC_PROBE_MS) is still read.
# The same program without the set-user-ID bit must honour them all (so
# the test can fail): the log file is created, rw-r--r-- despite umask 0,
# and USMC_KERNEL_COMPAT=1 with that cgroup fails. And a USMC_LOG file
# that is a symlink is refused, its target not created. Each run checks a
# context from usmc_ctx_create_env() with the environment as its list too.
#
# Needs root (to make a set-user-ID root copy and to run it as nobody)
# and a temporary directory on a mount without nosuid; skips (77) if not.
#
# Usage: test_privileged_env.sh <privileged_ctx>
set -euo pipefail
PROG=${1:?privileged_ctx}
NOBODY=65534
BIG_RMB=536870912
# shellcheck source=common/privileged.sh
. "$(dirname "$0")/common/privileged.sh"

if ! command -v setpriv >/dev/null; then
	echo "SKIP: no setpriv (util-linux)"
	exit $SKIP
fi
privileged_tmp set-user-ID
cp "$PROG" "$tmp/suid"
chown root:root "$tmp/suid"
chmod 4755 "$tmp/suid"
cp "$PROG" "$tmp/plain"
chmod 0755 "$tmp/plain"
mkdir "$tmp/w" # nobody's own directory, for the unprivileged run's log
chown "$NOBODY:$NOBODY" "$tmp/w"
if ! setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups test -x "$tmp/suid"; then
	echo "SKIP: nobody cannot reach $tmp (set TMPDIR to a directory others can enter)"
	exit $SKIP
fi

# as_nobody ENV... PROGRAM: run with umask 0 as nobody; its output in
# $tmp/out and $tmp/err, its exit status in $rc
as_nobody() {
	rc=0
	setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups -- \
		sh -c 'umask 0 && exec env "$@"' sh "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
	echo "  exit $rc: $(cat "$tmp/out" "$tmp/err")"
}

echo "--- set-user-ID root, run by nobody, umask 0"
as_nobody USMC_LOG="err,$tmp/x" USMC_KERNEL_COMPAT=1 \
	USMC_KERNEL_COMPAT_CGROUP="$tmp/no-such-cgroup" USMC_RMB_SIZE=$BIG_RMB \
	USMC_PROBE_MS=250 "$tmp/suid"
if [ -e "$tmp/x" ]; then
	fail "USMC_LOG's file was created by the privileged process: $(stat -c '%U %A' "$tmp/x")"
fi
if [ "$rc" != 0 ]; then
	fail "usmc_ctx_create() failed: kernel-compat (or another variable) was honoured"
else
	grep -q '^secure=1 ' "$tmp/out" || fail "not run with AT_SECURE"
	grep -q ' kernel_compat=0 ' "$tmp/out" || fail "kernel-compat attached"
	grep -q ' rmb_size=65536 ' "$tmp/out" || fail "USMC_RMB_SIZE was honoured"
	grep -q ' probe_ms=250$' "$tmp/out" || fail "USMC_PROBE_MS (harmless) was not read"
	grep -qx 'environ: kernel_compat=0 rmb_size=65536 probe_ms=250' "$tmp/out" ||
		fail "usmc_ctx_create_env() did not read its list as usmc_ctx_create() reads"
fi

echo "--- the same program without the set-user-ID bit, run by nobody, umask 0"
as_nobody USMC_LOG="err,$tmp/w/x" USMC_RMB_SIZE=$BIG_RMB "$tmp/plain"
[ "$rc" = 0 ] || fail "unprivileged run failed"
created_0644 "$tmp/w/x" USMC_LOG
grep -q ' rmb_size=536870912 ' "$tmp/out" || fail "USMC_RMB_SIZE not read unprivileged"
grep -q '^environ: .* rmb_size=536870912 ' "$tmp/out" ||
	fail "usmc_ctx_create_env(): USMC_RMB_SIZE not read unprivileged"
as_nobody USMC_KERNEL_COMPAT=1 USMC_KERNEL_COMPAT_CGROUP="$tmp/no-such-cgroup" "$tmp/plain"
[ "$rc" != 0 ] || fail "USMC_KERNEL_COMPAT=1 not honoured unprivileged (expected a failure)"

echo "--- USMC_LOG naming a symlink (root, not set-user-ID)"
ln -s "$tmp/target" "$tmp/link"
rc=0
USMC_LOG="err,$tmp/link" "$tmp/plain" >"$tmp/out" 2>"$tmp/err" || rc=$?
echo "  exit $rc: $(cat "$tmp/out" "$tmp/err")"
[ ! -e "$tmp/target" ] || fail "USMC_LOG followed a symlink and created its target"
[ "$rc" != 0 ] || fail "USMC_LOG naming a symlink was accepted"

privileged_end "a privileged process ignores the variables that name a file, a cgroup or a privilege"
