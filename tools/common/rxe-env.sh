# shellcheck shell=bash
# Sourced by the rxe shell tests and the rxe benchmarks (tools/bench-*rxe.sh,
# bench-interop.sh): topology of the RDMA "hosts" under test.
# Inside the guest (tests/rxe/vm-run.sh) guest-run.sh exports USMC_TEST_*;
# elsewhere the first RDMA device and its IPv4-mapped RoCE v2 GID are used
# for both ends (loopback). No device at all is a test failure, not a skip:
# whoever runs the rxe label decides where (see run-rxe-tests.sh).

rxe_fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# rxe_v4_gid <dev>: sets RXE_GID_INDEX and RXE_GID_IP from sysfs (builtins).
rxe_v4_gid() {
	local dir=/sys/class/infiniband/$1/ports/1 i g t h
	for ((i = 0; i < 32; i++)); do
		read -r g 2>/dev/null <"$dir/gids/$i" || continue
		case "$g" in 0000:0000:0000:0000:0000:ffff:*) ;; *) continue ;; esac
		read -r t 2>/dev/null <"$dir/gid_attrs/types/$i" || continue
		[ "$t" = "RoCE v2" ] || continue
		h=${g#0000:0000:0000:0000:0000:ffff:}
		h=${h/:/}
		RXE_GID_INDEX=$i
		RXE_GID_IP=$((16#${h:0:2})).$((16#${h:2:2})).$((16#${h:4:2})).$((16#${h:6:2}))
		return 0
	done
	return 1
}

if [ -z "${USMC_TEST_RXE_A:-}" ]; then
	for d in /sys/class/infiniband/*; do
		[ -e "$d" ] || rxe_fail "no RDMA device (run me with tests/rxe/vm-run.sh)"
		USMC_TEST_RXE_A=${d##*/}
		break
	done
	rxe_v4_gid "$USMC_TEST_RXE_A" ||
		rxe_fail "$USMC_TEST_RXE_A has no IPv4-mapped RoCE v2 GID"
	USMC_TEST_GID_INDEX_A=$RXE_GID_INDEX
	USMC_TEST_HOST_A=$RXE_GID_IP
	USMC_TEST_RXE_B=$USMC_TEST_RXE_A
	USMC_TEST_GID_INDEX_B=$USMC_TEST_GID_INDEX_A
	USMC_TEST_HOST_B=$USMC_TEST_HOST_A
	export USMC_TEST_RXE_A USMC_TEST_RXE_B USMC_TEST_HOST_A USMC_TEST_HOST_B
	export USMC_TEST_GID_INDEX_A USMC_TEST_GID_INDEX_B
fi
[ -e "/sys/class/infiniband/$USMC_TEST_RXE_A" ] || rxe_fail "no RDMA device $USMC_TEST_RXE_A"
[ -e "/sys/class/infiniband/$USMC_TEST_RXE_B" ] || rxe_fail "no RDMA device $USMC_TEST_RXE_B"

# rxe_retry_client <server pid> <client command...>: runs the client until it
# succeeds, up to 50 times 0.2 s apart while the server lives (it may not
# listen yet), its output in $RXE_TMP/client.log. With RXE_RETRY_IF set, only
# a client log matching that pattern is worth a retry. RXE_CLIENT_START is
# $EPOCHREALTIME at the last attempt's start. Fails if the client never did.
rxe_retry_client() {
	local server=$1
	shift
	for _ in $(seq 50); do
		# shellcheck disable=SC2034 # read by the caller
		RXE_CLIENT_START=$EPOCHREALTIME
		"$@" >"$RXE_TMP/client.log" 2>&1 && return 0
		if [ -n "${RXE_RETRY_IF:-}" ]; then
			grep -q "$RXE_RETRY_IF" "$RXE_TMP/client.log" || return 1
		fi
		kill -0 "$server" 2>/dev/null || return 1
		sleep 0.2
	done
	return 1
}

RXE_TMP=$(mktemp -d)
RXE_PIDS=()
rxe_cleanup() {
	local p
	for p in "${RXE_PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	rm -rf "$RXE_TMP"
}
trap rxe_cleanup EXIT
