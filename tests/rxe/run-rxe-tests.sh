#!/usr/bin/env bash
# Runs the ctest label "rxe" of a build tree where an RDMA device exists:
# on this host if its kernel already has devices (/sys/class/infiniband),
# otherwise inside the soft-RoCE guest with the two-host setup and the
# kernel's smc modules. Fails if a test fails or the guest fails/times out;
# the output is printed as it comes.
#
# Usage: tests/rxe/run-rxe-tests.sh <build-dir> [extra ctest args...]
# Environment:
#   USMC_RXE_TIMEOUT   guest budget in seconds (default 900)
#   USMC_RXE_FORCE_VM  1: use the guest even if this host has devices
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=${1:?usage: run-rxe-tests.sh <build-dir> [ctest args...]}
shift
[ -e "$BUILD/CTestTestfile.cmake" ] || {
	echo "run-rxe-tests: $BUILD is not a configured build tree" >&2
	exit 2
}
BUILD=$(cd "$BUILD" && pwd)
# -L is a regular expression: anchored, so that rxe_known_bad (scenarios that
# fail until a library defect is fixed) and rxe_vm alone do not match; the
# rxe_vm tests also carry rxe.
CTEST=(ctest --test-dir "$BUILD" -L "^rxe$" --output-on-failure "$@")

host_has_rdma() {
	local d
	for d in /sys/class/infiniband/*; do
		[ -e "$d" ] && return 0
	done
	return 1
}

if [ "${USMC_RXE_FORCE_VM:-0}" != 1 ] && host_has_rdma; then
	# The host's own devices: one "host" (loopback); tests that need the
	# guest's two-host topology are labelled rxe_vm.
	echo "run-rxe-tests: this host has RDMA devices; running here (not rxe_vm tests)"
	exec "${CTEST[@]}" -LE rxe_vm
fi
exec "$SRC/vm-run.sh" --build-dir "$BUILD" --setup two --smc \
	--timeout "${USMC_RXE_TIMEOUT:-900}" -- "${CTEST[@]}"
