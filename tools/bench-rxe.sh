#!/usr/bin/env bash
# SMC-R benchmark in the soft-RoCE guest, all in one guest run:
#   raw verbs ceiling: ib_write_bw 64 KiB (perftest), ibv_rc_pingpong 1 B
#   usmc_bench over usmc SMC-R, usmc forced to TCP (USMC_SMC=0), plain TCP
# and the ratios between them (the kernel's SMC-R beside usmc, in the same
# run: tools/bench-interop.sh). Usage (host):
#   tests/rxe/vm-run.sh --setup two -- $PWD/tools/bench-rxe.sh $PWD/build
# Env: BENCH_ITERS (500), BENCH_STREAM bytes (33554432).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common/rxe-env.sh"
. "$(dirname "${BASH_SOURCE[0]}")/common/bench-fns.sh"

BUILD=${1:?build directory}
BENCH=$BUILD/tools/usmc_bench
ITERS=${BENCH_ITERS:-500}
STREAM=${BENCH_STREAM:-33554432}
A=$USMC_TEST_HOST_A B=$USMC_TEST_HOST_B
OUT=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$OUT"' EXIT

# --- raw verbs ceiling
ib_write_bw -d "$USMC_TEST_RXE_B" -x "$USMC_TEST_GID_INDEX_B" -s 65536 -n 400 -F \
	>"$OUT/bw_srv" 2>&1 &
PIDS+=($!)
retry ib_write_bw -d "$USMC_TEST_RXE_A" -x "$USMC_TEST_GID_INDEX_A" -s 65536 -n 400 -F "$B" \
	>"$OUT/bw_cli" 2>&1
VERBS_BW=$(perftest_mbps "$OUT/bw_cli")
ibv_rc_pingpong -d "$USMC_TEST_RXE_B" -g "$USMC_TEST_GID_INDEX_B" -s 1 -n "$ITERS" -p 18700 \
	>"$OUT/pp_srv" 2>&1 &
PIDS+=($!)
retry ibv_rc_pingpong -d "$USMC_TEST_RXE_A" -g "$USMC_TEST_GID_INDEX_A" -s 1 -n "$ITERS" \
	-p 18700 "$B" >"$OUT/pp_cli" 2>&1
VERBS_RTT=$(awk '/usec\/iter/ { print $(NF-1) }' "$OUT/pp_cli" | head -1)
echo "verbs: ib_write_bw 64KiB ${VERBS_BW} MB/s, ibv_rc_pingpong 1B ${VERBS_RTT} us/iter"

# --- usmc_bench servers on host B
"$BENCH" -s "$B:18701" >"$OUT/usmc_srv" 2>&1 &
PIDS+=($!)
USMC_RMB_SIZE=1048576 USMC_SNDBUF_SIZE=1048576 "$BENCH" -s "$B:18704" >"$OUT/usmc_srv1m" 2>&1 &
PIDS+=($!)
"$BENCH" -s "$B:18702" --api tcp >"$OUT/tcp_srv" 2>&1 &
PIDS+=($!)
sleep 1
ARGS=(--iters "$ITERS" --stream "$STREAM")
retry "$BENCH" -c "$B:18701" "${ARGS[@]}" | tee "$OUT/smcr"
# the same with 1 MiB RMB and send buffer (on both ends: the server's RMB is
# what the client writes into)
USMC_RMB_SIZE=1048576 USMC_SNDBUF_SIZE=1048576 retry "$BENCH" -c "$B:18704" "${ARGS[@]}" \
	--sizes 1 | sed 's/api=usmc-smcr/api=usmc-smcr-1MiB/' | tee "$OUT/smcr1m"
USMC_SMC=0 retry "$BENCH" -c "$B:18701" "${ARGS[@]}" | tee "$OUT/usmc_tcp"
retry "$BENCH" -c "$B:18702" --api tcp "${ARGS[@]}" | tee "$OUT/tcp"
grep -q "api=usmc-smcr" "$OUT/smcr" || rxe_fail "usmc_bench did not run SMC-R"

val() { sed -n "s/.*$2=\([0-9.]*\).*/\1/p" "$OUT/$1" | sed -n "${3}p"; }
echo "--- ratios (same guest run)"
for i in 1 2 3; do
	size=$(val smcr size "$i")
	s=$(val smcr rtt_us "$i") u=$(val usmc_tcp rtt_us "$i") t=$(val tcp rtt_us "$i")
	echo "rtt ${size}B: smcr ${s} us, usmc-tcp ${u} us, tcp ${t} us;" \
		"smcr/tcp $(ratio "$s" "$t"), smcr/verbs-1B $(ratio "$s" "$VERBS_RTT")"
done
s=$(val smcr MBps 1) u=$(val usmc_tcp MBps 1) t=$(val tcp MBps 1)
echo "stream: smcr ${s} MB/s, usmc-tcp ${u} MB/s, tcp ${t} MB/s, verbs ${VERBS_BW} MB/s;" \
	"smcr/verbs $(ratio "$s" "$VERBS_BW"), smcr/tcp $(ratio "$s" "$t")"
m=$(val smcr1m MBps 1) r=$(val smcr1m rtt_us 1)
echo "smcr with 1 MiB buffers: stream ${m} MB/s, smcr/verbs $(ratio "$m" "$VERBS_BW"); rtt 1B ${r} us"
