#!/usr/bin/env bash
# Latency and throughput across the two soft-RoCE hosts, one guest run:
# libusmc (SMC-R), libusmc forced to TCP, plain TCP sockets, and the raw
# verbs ceiling of the same rxe pair (ib_write_bw, ibv_rc_pingpong), with
# ratios. Builds first; a fresh Debian 12 machine needs nothing else.
#
#   tools/bench-rxe.sh [SECONDS per measurement, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-3}
tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target usmc_bench >/dev/null
exec tests/rxe/vm-run.sh --build-dir "$PWD/build" --setup two --timeout 900 -- \
	"$PWD/tools/bench-rxe-guest.sh" "$PWD/build" "$secs"
