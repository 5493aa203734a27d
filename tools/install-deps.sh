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
	wrk curl netcat-openbsd
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
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
