#!/usr/bin/env bash
# Installs everything libusmc needs on a fresh Debian 12 machine: the build,
# the tests (cmocka, sanitizers, fuzzers, valgrind, wrk) and the soft-RoCE
# harness (qemu, busybox, kmod, rdma-core utilities).
#
# Usage: tools/install-deps.sh            (as root, or with sudo available)
# Skips apt entirely when every package is already installed.
set -euo pipefail

PACKAGES=(
	# build
	build-essential cmake pkg-config git
	libibverbs-dev librdmacm-dev liburing-dev libev-dev libcmocka-dev
	# checks: sanitizers, fuzzers, style, leaks, man pages (lint, man -l)
	clang libclang-rt-14-dev clang-format valgrind mandoc man-db
	# plain TCP peers and load for the examples' tests
	wrk curl netcat-openbsd socat
	# unmodified programs under usmc_run (tests/preload, docs/preload.md);
	# their services are not started (policy-rc.d below)
	nginx-light redis-server iperf3
	# usmc-stat tests: the JSON schema checker (tests/usmc_stat_check.py)
	python3
	# soft-RoCE harness (tests/rxe): guest kernel is fetched, not installed
	qemu-system-x86 busybox-static kmod cpio xz-utils iproute2 procps
	rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest
	# kernel interop: BPF sock_ops program
	libbpf-dev linux-libc-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# No package may start a daemon (nginx, redis): the tests run their own.
policy=
if [ ! -e /usr/sbin/policy-rc.d ]; then
	policy=/usr/sbin/policy-rc.d
	printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
	$SUDO chmod +x "$policy"
fi
rc=0
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" || rc=$?
[ -z "$policy" ] || $SUDO rm -f "$policy"
exit $rc
