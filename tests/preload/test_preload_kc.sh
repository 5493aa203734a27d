#!/usr/bin/env bash
# test_preload's socket API checks in kernel-compatible mode, usmc_run's
# default (label tcp; needs root, Linux 6.12 and BPF, else skips: 77).
# There the preloaded listener is in direct mode (docs/listener.md "Plain
# TCP: direct mode") and what the preload polls for it, usmc_listener_fd(),
# is an epoll set, not an eventfd: the pre-fork workers register the
# listening socket with EPOLLEXCLUSIVE, as nginx's do, which the kernel
# refuses for an epoll set. All but test_proposal_declined, whose raw
# PROPOSAL comes from a client whose SYN said no SMC: TCP at once here.
#
# usage: test_preload_kc.sh USMC_RUN TEST_PRELOAD
set -euo pipefail
usmc_run=$1 prog=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
env -u USMC_RUN_SMC_PEERS "$usmc_run" USMC_KERNEL_COMPAT=1 USMC_LOG="info,$log" "$prog" \
	test_fd_numbers test_dup test_prefork test_poll_mixed test_nonblock_connect \
	test_eof_errors test_closed_behind || rc=$?
[ "$rc" = 0 ] || exit "$rc"
if ! grep -q "kernel-compat: BPF sock_ops program .*attached" "$log"; then
	echo "skip: no kernel-compatible mode here (the BPF program did not attach)"
	exit 77
fi
