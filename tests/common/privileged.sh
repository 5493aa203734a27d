# SPDX-License-Identifier: MIT
# Sourced by the tests of a privileged process (a set-user-ID or
# set-group-ID copy of a program): tests/test_privileged_env.sh and
# tests/preload/test_preload_privileged.sh.
#
#   privileged_tmp BIT   as root, sets tmp: a scratch directory (0755,
#                        removed at exit) on a mount without nosuid; else
#                        exits 77 (skip), saying why BIT cannot apply
#   fail MESSAGE         counts a failed check, goes on
#   created_0644 FILE VAR  VAR's FILE exists, rw-r--r-- (made under umask 0)
#   privileged_end MESSAGE exits 1 if a check failed, else says PASS

SKIP=77
failures=0

privileged_tmp() {
	if [ "$(id -u)" != 0 ]; then
		echo "SKIP: not root: a $1 copy cannot be made"
		exit $SKIP
	fi
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	chmod 0755 "$tmp"
	if findmnt -no OPTIONS --target "$tmp" | tr , '\n' | grep -qx nosuid; then
		echo "SKIP: $tmp is on a nosuid mount: the $1 bit would not apply"
		exit $SKIP
	fi
}

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

created_0644() {
	local mode
	if [ ! -f "$1" ]; then
		fail "the unprivileged run did not create $2's file"
		return
	fi
	mode=$(stat -c %a "$1")
	[ "$mode" = 644 ] || fail "$2's file created with mode $mode under umask 0, not 644"
}

privileged_end() {
	if [ $failures != 0 ]; then
		echo "FAIL: $failures check(s) failed"
		exit 1
	fi
	echo "PASS: $*"
}
