#!/usr/bin/env bash
# The demo: two usmc processes talk over a real soft-RoCE (rxe) device pair
# inside a qemu guest, once with SMC-R allowed and once forced to TCP, and
# print each connection's mode, fallback reason, link group and bytes moved.
# A fresh Debian 12 machine needs nothing else: this installs, builds, boots.
#
#   tools/demo.sh [BYTES]        (default 16 MiB echoed each way)
set -euo pipefail
cd "$(dirname "$0")/.."
bytes=${1:-$((16 << 20))}
tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target echo_server echo_client >/dev/null
exec tests/rxe/vm-run.sh --build-dir "$PWD/build" --setup two --timeout 600 -- \
	"$PWD/tools/demo-guest.sh" "$PWD/build" "$bytes"
