#!/usr/bin/env bash
# usmc <-> Linux kernel SMC-R benchmark in the soft-RoCE guest (the interop and
# run-to-completion goals, docs/bench/README.md),
# all in one guest run over the same rxe pair (host A 10.0.0.1 -> host B 10.0.0.2):
#   kernel <-> kernel   usmc_bench --api smc on both ends (plain AF_SMC sockets)
#   usmc   <-> usmc     usmc_bench (libusmc) on both ends
#   usmc   <-> usmc     the same with USMC_BUSY_POLL=1 on both ends (busy)
#   usmc   -> kernel    usmc client, kernel AF_SMC server
#   kernel -> usmc      kernel AF_SMC client, usmc server
#   tcp    <-> tcp      plain TCP, for reference
#   ib_write_bw         raw verbs, 64 KiB messages: the stream ceiling
# Each pair: 64 B round trips and a one-way stream, BENCH_ROUNDS rounds (3)
# over all pairs in turn; the summary gives each figure's median over the
# rounds and the ratios to kernel <-> kernel. Then the cost per round trip
# of each end: usmc's engine counters (thread wake-ups, system calls as the
# library counts them), and the client's system calls counted by strace -c
# -f (two runs of different lengths, the difference divided by the extra
# round trips, so connection setup cancels out). Every SMC pair must run
# SMC-R (usmc: usmc_conn_info; kernel client: smc_diag), else the script
# fails. Usage (host, build dir with smc_kctl built):
#   tests/rxe/vm-run.sh --setup two --smc -- $PWD/tools/bench-interop.sh $PWD/build
# Env: BENCH_ROUNDS (3), BENCH_ITERS (500), BENCH_STREAM bytes (33554432),
# BENCH_SIZES (64), BENCH_STRACE (1: the strace runs; 0 skips them),
# BENCH_BUF bytes: RMB and send buffer size of every end (kernel: net.smc.rmem
# and wmem; usmc: USMC_RMB_SIZE, USMC_SNDBUF_SIZE); default: each one's own.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common/rxe-env.sh"
. "$(dirname "${BASH_SOURCE[0]}")/common/bench-fns.sh"

BUILD=${1:?build directory}
BENCH=$BUILD/tools/usmc_bench
KCTL=$BUILD/tests/smc_kctl
ROUNDS=${BENCH_ROUNDS:-3}
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
	"rmem=$(cat /proc/sys/net/smc/rmem); usmc: RMB/sndbuf ${USMC_RMB_SIZE:-default};" \
	"$(nproc) CPUs; $ROUNDS rounds"

# servers on host B (one per pair, so each usmc server's lines are its pair's)
"$BENCH" -s "$B:18711" --api smc >"$OUT/ksrv" 2>&1 &
PIDS+=($!)
"$BENCH" -s "$B:18712" >"$OUT/srv.uu" 2>&1 &
PIDS+=($!)
"$BENCH" -s "$B:18713" --api tcp >"$OUT/tsrv" 2>&1 &
PIDS+=($!)
USMC_BUSY_POLL=1 "$BENCH" -s "$B:18714" >"$OUT/srv.ub" 2>&1 &
PIDS+=($!)
"$BENCH" -s "$B:18715" >"$OUT/srv.ku" 2>&1 &
PIDS+=($!)
sleep 1
ARGS=(--iters "$ITERS" --stream "$STREAM" --sizes "$SIZES")

run() { # name round expected-api client args...
	local name=$1 r=$2 want=$3 f
	shift 3
	f=$OUT/$name.$r
	retry "$BENCH" "$@" "${ARGS[@]}" | sed "s/^/$name: /" | tee "$f"
	grep -q "api=$want " "$f" || rxe_fail "$name: expected api=$want on every connection"
	! grep -v "api=$want " "$f" | grep -q api= || rxe_fail "$name: a connection did not run $want"
}
bw() { # round: ib_write_bw with 64 KiB messages
	ib_write_bw -d "$USMC_TEST_RXE_B" -x "$USMC_TEST_GID_INDEX_B" -s 65536 -n 400 -F \
		>"$OUT/bw_srv" 2>&1 &
	PIDS+=($!)
	retry ib_write_bw -d "$USMC_TEST_RXE_A" -x "$USMC_TEST_GID_INDEX_A" -s 65536 -n 400 -F \
		"$B" >"$OUT/bw_cli" 2>&1
	echo "verbs: api=ib_write_bw MBps=$(perftest_mbps "$OUT/bw_cli")" |
		tee "$OUT/vb.$1"
}
for r in $(seq "$ROUNDS"); do
	echo "--- round $r"
	run kk "$r" kernel-smcr -c "$B:18711" --api smc --bind "$A"
	run uu "$r" usmc-smcr -c "$B:18712"
	USMC_BUSY_POLL=1 run ub "$r" usmc-smcr -c "$B:18714"
	run uk "$r" usmc-smcr -c "$B:18711"
	run ku "$r" kernel-smcr -c "$B:18715" --api smc --bind "$A"
	run tt "$r" tcp -c "$B:18713" --api tcp
	bw "$r"
done

# field $2 of pair $1 in every round (first line that has it), one per line
echo "--- summary: medians of $ROUNDS rounds (same guest run, same rxe pair; rtt = ${SIZES%%,*} B round trip, us)"
printf "%-24s %8s %8s %8s %8s | %7s %7s %7s %7s\n" pair "MB/s" "rtt" "p50" "p99" \
	"MB/s:k" "rtt:k" "p50:k" "p99:k"
for p in kk:kernel-kernel uu:usmc-usmc ub:usmc-usmc-busy-poll uk:usmc-client-kernel-srv \
	ku:kernel-client-usmc-srv tt:tcp-tcp vb:ib_write_bw-64KiB; do
	n=${p%%:*}
	printf "%-24s %8s %8s %8s %8s | %7s %7s %7s %7s\n" "${p#*:}" "$(med "$n" MBps)" \
		"$(med "$n" rtt_us)" "$(med "$n" p50_us)" "$(med "$n" p99_us)" \
		"$(ratio "$(med "$n" MBps)" "$(med kk MBps)")" \
		"$(ratio "$(med "$n" rtt_us)" "$(med kk rtt_us)")" \
		"$(ratio "$(med "$n" p50_us)" "$(med kk p50_us)")" \
		"$(ratio "$(med "$n" p99_us)" "$(med kk p99_us)")"
done
echo "usmc-usmc stream / ib_write_bw: $(ratio "$(med uu MBps)" "$(med vb MBps)")"

# the servers' lines: one per ping-pong and one per stream, in round order
for n in uu ub ku; do
	grep '^server: test=pingpong' "$OUT/srv.$n" |
		awk -v d="$OUT" -v n="$n" '{ print > (d "/s" n "." NR) }' || true
	grep '^server: test=stream' "$OUT/srv.$n" |
		awk -v d="$OUT" -v n="$n" '{ print > (d "/xs" n "." NR) }' || true
done
# the clients' stream lines
for n in uu ub uk; do
	for r in $(seq "$ROUNDS"); do grep 'test=stream' "$OUT/$n.$r" >"$OUT/x$n.$r" || true; done
done
echo "--- cost per round trip of each end (medians; usmc engine counters)"
printf "%-24s %9s %9s %9s %9s %9s %9s\n" "end" wakeups syscalls cqes doorbells ch_sleeps spins_ok
for p in uu:usmc-usmc-client suu:usmc-usmc-server ub:busy-poll-client sub:busy-poll-server \
	uk:usmc-client-to-kernel sku:usmc-server-to-kernel; do
	n=${p%%:*}
	printf "%-24s %9s %9s %9s %9s %9s %9s\n" "${p#*:}" "$(med "$n" wakeups)" \
		"$(med "$n" syscalls)" "$(med "$n" cqes)" "$(med "$n" doorbells)" \
		"$(med "$n" channel_sleeps)" "$(med "$n" spins_ok)"
done

echo "--- cost per MiB of the stream at each end (medians; usmc engine counters)"
printf "%-24s %9s %9s %9s %9s %9s %9s\n" "end" reads wakeups syscalls cqes doorbells ch_sleeps
for p in xuu:usmc-usmc-sender xsuu:usmc-usmc-receiver xub:busy-poll-sender \
	xsub:busy-poll-receiver xuk:usmc-sender-to-kernel xsku:usmc-receiver-from-kernel; do
	n=${p%%:*}
	printf "%-24s %9s %9s %9s %9s %9s %9s\n" "${p#*:}" "$(med "$n" reads)" "$(med "$n" wakeups)" \
		"$(med "$n" syscalls)" "$(med "$n" cqes)" "$(med "$n" doorbells)" \
		"$(med "$n" channel_sleeps)"
done

if [ "${BENCH_STRACE:-1}" = 1 ] && command -v strace >/dev/null; then
	echo "--- client system calls per round trip, strace -c -f (all threads; runs of 100 and 600)"
	calls() { # file: the total of strace -c
		awk '$NF == "total" { print $4 }' "$1"
	}
	sc() { # name client args...: system calls per round trip
		local name=$1 a b
		shift
		strace -f -c -o "$OUT/st.$name.1" "$BENCH" "$@" --iters 100 --stream 0 \
			--sizes "${SIZES%%,*}" >/dev/null
		strace -f -c -o "$OUT/st.$name.2" "$BENCH" "$@" --iters 600 --stream 0 \
			--sizes "${SIZES%%,*}" >/dev/null
		a=$(calls "$OUT/st.$name.1") b=$(calls "$OUT/st.$name.2")
		awk -v a="$a" -v b="$b" -v n="$name" \
			'BEGIN { printf "%-24s %.2f system calls per round trip\n", n, (b - a) / 550 }'
	}
	sc kernel-kernel -c "$B:18711" --api smc --bind "$A"
	sc usmc-usmc -c "$B:18712"
	sc usmc-usmc-busy-poll -c "$B:18714"
fi
