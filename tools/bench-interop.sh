#!/usr/bin/env bash
# usmc <-> Linux kernel SMC-R benchmark in the soft-RoCE guest (issue 8), all
# in one guest run over the same rxe pair (host A 10.0.0.1 -> host B 10.0.0.2):
#   kernel <-> kernel   usmc_bench --api smc on both ends (plain AF_SMC sockets)
#   usmc   <-> usmc     usmc_bench (libusmc) on both ends
#   usmc   -> kernel    usmc client, kernel AF_SMC server
#   kernel -> usmc      kernel AF_SMC client, usmc server
#   tcp    <-> tcp      plain TCP, for reference
# Each pair: 64 B round trips and a one-way stream; then the ratios. Every
# SMC pair must run SMC-R (usmc: usmc_conn_info; kernel client: smc_diag),
# else the script fails. Usage (host, build dir with smc_kctl built):
#   tests/rxe/vm-run.sh --setup two --smc -- $PWD/tools/bench-interop.sh $PWD/build
# Env: BENCH_ITERS (500), BENCH_STREAM bytes (33554432), BENCH_SIZES (64),
# BENCH_BUF bytes: RMB and send buffer size of every end (kernel: net.smc.rmem
# and wmem; usmc: USMC_RMB_SIZE, USMC_SNDBUF_SIZE); default: each one's own.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common/rxe-env.sh"

BUILD=${1:?build directory}
BENCH=$BUILD/tools/usmc_bench
KCTL=$BUILD/tests/smc_kctl
ITERS=${BENCH_ITERS:-500}
STREAM=${BENCH_STREAM:-33554432}
SIZES=${BENCH_SIZES:-64}
A=$USMC_TEST_HOST_A B=$USMC_TEST_HOST_B
UEID=USMC-BENCH-INTEROP
OUT=$(mktemp -d)
PIDS=()
WMEM=$(cat /proc/sys/net/smc/wmem 2>/dev/null || true)
RMEM=$(cat /proc/sys/net/smc/rmem 2>/dev/null || true)
cleanup() {
	kill "${PIDS[@]}" 2>/dev/null || true
	rm -rf "$OUT"
	if [ -n "${BENCH_BUF:-}" ]; then # the next run in this guest gets the defaults
		echo "$WMEM" >/proc/sys/net/smc/wmem
		echo "$RMEM" >/proc/sys/net/smc/rmem
	fi
}
trap cleanup EXIT

[ -e /proc/sys/net/smc ] || rxe_fail "kernel smc not loaded (vm-run.sh --smc)"
# one UEID on both ends: the kernel (SMC-Rv2 on rxe needs one) and usmc
"$KCTL" ueid flush
"$KCTL" ueid add "$UEID"
if [ -n "${BENCH_BUF:-}" ]; then
	echo "$BENCH_BUF" >/proc/sys/net/smc/wmem
	echo "$BENCH_BUF" >/proc/sys/net/smc/rmem
	export USMC_RMB_SIZE=$BENCH_BUF USMC_SNDBUF_SIZE=$BENCH_BUF
fi
export USMC_UEID=$UEID USMC_KERNEL_COMPAT=1 USMC_BENCH_SMC_KCTL=$KCTL
echo "kernel $(uname -r): net.smc.wmem=$(cat /proc/sys/net/smc/wmem)" \
	"rmem=$(cat /proc/sys/net/smc/rmem); usmc: RMB/sndbuf ${USMC_RMB_SIZE:-default}"

retry() { # run a client until its server listens
	for _ in $(seq 50); do "$@" && return 0; sleep 0.2; done
	return 1
}

# servers on host B
"$BENCH" -s "$B:18711" --api smc >"$OUT/ksrv" 2>&1 &
PIDS+=($!)
"$BENCH" -s "$B:18712" >"$OUT/usrv" 2>&1 &
PIDS+=($!)
"$BENCH" -s "$B:18713" --api tcp >"$OUT/tsrv" 2>&1 &
PIDS+=($!)
sleep 1
ARGS=(--iters "$ITERS" --stream "$STREAM" --sizes "$SIZES")

run() { # name expected-api client args...
	local name=$1 want=$2
	shift 2
	retry "$BENCH" "$@" "${ARGS[@]}" | sed "s/^/$name: /" | tee "$OUT/$name"
	grep -q "api=$want " "$OUT/$name" ||
		rxe_fail "$name: expected api=$want on every connection"
	! grep -v "api=$want " "$OUT/$name" | grep -q api= ||
		rxe_fail "$name: a connection did not run $want"
}
run kk kernel-smcr -c "$B:18711" --api smc --bind "$A"
run uu usmc-smcr -c "$B:18712"
run uk usmc-smcr -c "$B:18711"
run ku kernel-smcr -c "$B:18712" --api smc --bind "$A"
run tt tcp -c "$B:18713" --api tcp

val() { sed -n "s/.*$2=\([0-9.]*\).*/\1/p" "$OUT/$1" | sed -n "${3:-1}p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo "--- summary (same guest run, same rxe pair; rtt = ${SIZES%%,*} B round trip)"
printf "%-22s %12s %12s %16s %16s\n" pair "stream MB/s" "rtt us" "MB/s vs k<->k" "rtt vs k<->k"
for p in kk:kernel-kernel uu:usmc-usmc uk:usmc-client-kernel-srv ku:kernel-client-usmc-srv \
	tt:tcp-tcp; do
	n=${p%%:*}
	printf "%-22s %12s %12s %16s %16s\n" "${p#*:}" "$(val "$n" MBps)" "$(val "$n" rtt_us)" \
		"$(ratio "$(val "$n" MBps)" "$(val kk MBps)")" \
		"$(ratio "$(val "$n" rtt_us)" "$(val kk rtt_us)")"
done
