# SPDX-License-Identifier: MIT
# Sourced by the tests of what usmc-stat trusts: a stat_fake_publisher in
# the background, held by a pipe on fd 4 (closing it ends the publisher).
# Needs FAKE (the program) set. Sets tmp (a scratch directory, removed at
# exit by fake_cleanup, the EXIT trap) and fail().
#
#   fake_start [setpriv options --] PID FIRST COUNT REPLY_FILE [TRICKLE_MS]
#       sets fake_pid (the publisher's own pid) once it has bound its names
#   fake_stop

fake_pid=
fake_bg=
tmp=$(mktemp -d)

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

fake_start() {
	local pre=()
	if [ "${1:-}" = setpriv ]; then
		while [ "$1" != -- ]; do
			pre+=("$1")
			shift
		done
		shift
		pre+=(--)
	fi
	rm -f "$tmp/fake.in" "$tmp/fake.out"
	mkfifo "$tmp/fake.in"
	chmod 0644 "$tmp/fake.in"
	"${pre[@]}" "$FAKE" "$@" <"$tmp/fake.in" >"$tmp/fake.out" 2>"$tmp/fake.err" &
	fake_bg=$!
	exec 4>"$tmp/fake.in"
	for _ in $(seq 100); do
		if grep -q '^ready' "$tmp/fake.out"; then
			fake_pid=$(awk '/^ready/ {print $2}' "$tmp/fake.out")
			return 0
		fi
		kill -0 "$fake_bg" 2>/dev/null || fail "stat_fake_publisher died: $(cat "$tmp/fake.err")"
		sleep 0.1
	done
	fail "stat_fake_publisher never got ready"
}

fake_stop() {
	[ -n "$fake_bg" ] || return 0
	exec 4>&-
	wait "$fake_bg" || true
	fake_bg=
}

fake_cleanup() {
	fake_stop
	rm -rf "$tmp"
}
trap fake_cleanup EXIT
