#!/usr/bin/env bash
# Two builds of libusmc side by side with the kernel's SMC-R, 64 B round
# trips in one soft-RoCE guest run (an engine change, before and after). Host A 10.0.0.1 -> host B 10.0.0.2:
#   kk    kernel <-> kernel   usmc_bench --api smc on both ends
#   a     usmc <-> usmc       build A's usmc_bench on both ends
#   b     usmc <-> usmc       build B's usmc_bench on both ends
# Rounds alternate the pairs; the summary gives each pair's medians over the
# rounds (mean, p50, p99, and the engine's wake-ups and system calls per
# round trip) and the ratios to kernel <-> kernel. Every pair must run
# SMC-R, else the script fails. Usage (host; both builds with usmc_bench,
# build B with smc_kctl):
#   tests/rxe/vm-run.sh --setup two --smc -- \
#       $PWD/tools/bench-rtt-ab.sh $PWD/build-old $PWD/build
# Env: BENCH_ROUNDS (5), BENCH_ITERS (500), BENCH_STREAM bytes (0): with
# more than 0, each client also streams that much one way after its round
# trips, and the summary has the stream's MB/s.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common/rxe-env.sh"
. "$(dirname "${BASH_SOURCE[0]}")/common/bench-fns.sh"

BENCH_A=${1:?build directory A}/tools/usmc_bench
BENCH_B=${2:?build directory B}/tools/usmc_bench
KCTL=$2/tests/smc_kctl
ROUNDS=${BENCH_ROUNDS:-5}
ITERS=${BENCH_ITERS:-500}
STREAM=${BENCH_STREAM:-0}
A=$USMC_TEST_HOST_A B=$USMC_TEST_HOST_B
UEID=USMC-BENCH-AB
OUT=$(mktemp -d)
PIDS=()
cleanup() {
	kill "${PIDS[@]}" 2>/dev/null || true
	rm -rf "$OUT"
}
trap cleanup EXIT

[ -e /proc/sys/net/smc ] || rxe_fail "kernel smc not loaded (vm-run.sh --smc)"
"$KCTL" ueid flush
"$KCTL" ueid add "$UEID"
export USMC_UEID=$UEID USMC_KERNEL_COMPAT=1 USMC_BENCH_SMC_KCTL=$KCTL

"$BENCH_B" -s "$B:18721" --api smc >"$OUT/ksrv" 2>&1 &
PIDS+=($!)
"$BENCH_A" -s "$B:18722" >"$OUT/srv.a" 2>&1 &
PIDS+=($!)
"$BENCH_B" -s "$B:18723" >"$OUT/srv.b" 2>&1 &
PIDS+=($!)
sleep 1
ARGS=(--iters "$ITERS" --stream "$STREAM" --sizes 64)

run() { # name round expected-api client...
	local name=$1 r=$2 want=$3 f
	shift 3
	f=$OUT/$name.$r
	retry "$@" "${ARGS[@]}" | sed "s/^/$name: /" | tee "$f"
	grep -q "api=$want " "$f" || rxe_fail "$name: expected api=$want"
}
for r in $(seq "$ROUNDS"); do
	echo "--- round $r"
	run kk "$r" kernel-smcr "$BENCH_B" -c "$B:18721" --api smc --bind "$A"
	run a "$r" usmc-smcr "$BENCH_A" -c "$B:18722"
	run b "$r" usmc-smcr "$BENCH_B" -c "$B:18723"
done

echo "--- summary: medians of $ROUNDS rounds (64 B round trip, us; A = $1, B = $2)"
printf "%-16s %8s %8s %8s | %6s %6s %6s | %7s %8s | %7s %6s\n" pair rtt p50 p99 "rtt:k" \
	"p50:k" "p99:k" wakeups syscalls MB/s "MB/s:k"
for p in kk:kernel-kernel a:usmc-A b:usmc-B; do
	k=${p%%:*}
	printf "%-16s %8s %8s %8s | %6s %6s %6s | %7s %8s | %7s %6s\n" "${p#*:}" "$(med "$k" rtt_us)" \
		"$(med "$k" p50_us)" "$(med "$k" p99_us)" \
		"$(ratio "$(med "$k" rtt_us)" "$(med kk rtt_us)")" \
		"$(ratio "$(med "$k" p50_us)" "$(med kk p50_us)")" \
		"$(ratio "$(med "$k" p99_us)" "$(med kk p99_us)")" \
		"$(med "$k" wakeups)" "$(med "$k" syscalls)" "$(med "$k" MBps)" \
		"$(ratio "$(med "$k" MBps)" "$(med kk MBps)")"
done
