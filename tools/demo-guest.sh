#!/usr/bin/env bash
# Runs inside the soft-RoCE guest (see tools/demo.sh): echo_server on host B,
# echo_client from host A, first with SMC-R allowed, then forced to TCP.
set -euo pipefail
build=$1 bytes=$2
a=${USMC_TEST_HOST_A:?not in the soft-RoCE guest} b=${USMC_TEST_HOST_B:?}
port=7777

echo "--- RDMA devices (rdma link):"
rdma link show
run() { # label, client args...
	local label=$1
	shift
	echo
	echo "--- $label: echo_client on $a -> echo_server on $b, $bytes bytes each way"
	"$build/examples/echo_server" -a "$b" -p "$port" -n 1 | sed 's/^/server: /' &
	local srv=$!
	for _ in $(seq 100); do
		grep -q ":$(printf '%04X' "$port") " /proc/net/tcp 2>/dev/null && break
		sleep 0.05
	done
	"$build/examples/echo_client" -b "$bytes" "$@" "$b" "$port" | sed 's/^/client: /'
	wait "$srv"
	port=$((port + 1))
}
run "SMC-R allowed"
run "forced to TCP (-t)" -t
