#!/usr/bin/env bash
# Inside the soft-RoCE guest (tools/bench-rxe.sh): servers on host B, clients
# on host A, every transport measured by the same usmc_bench code.
set -euo pipefail
build=$1 secs=$2
bench=$build/tools/usmc_bench
a=${USMC_TEST_HOST_A:?not in the soft-RoCE guest} b=${USMC_TEST_HOST_B:?}
ga=${USMC_TEST_GID_INDEX_A:?} gb=${USMC_TEST_GID_INDEX_B:?}
rxa=${USMC_TEST_RXE_A:?} rxb=${USMC_TEST_RXE_B:?}
out=$(mktemp)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

"$bench" server -a "$b" -p 7878 >/dev/null & pids+=($!)
"$bench" server -P -a "$b" -p 7879 >/dev/null & pids+=($!)
sleep 1

measure() { # label, env..., -- args...
	local label=$1
	shift
	local line
	line=$(env "$@" 2>&1 | tail -n1)
	printf '%-10s %s\n' "$label" "$line" | tee -a "$out"
}
for size in 1 1024 65536; do
	measure smcr "$bench" pingpong -s "$size" -d "$secs" "$b" 7878
	measure usmc-tcp USMC_SMC=0 "$bench" pingpong -s "$size" -d "$secs" "$b" 7878
	measure plain "$bench" pingpong -P -s "$size" -d "$secs" "$b" 7879
done
measure smcr "$bench" stream -s 65536 -d "$secs" "$b" 7878
measure usmc-tcp USMC_SMC=0 "$bench" stream -s 65536 -d "$secs" "$b" 7878
measure plain "$bench" stream -P -s 65536 -d "$secs" "$b" 7879

# raw verbs ceiling of the same pair
ib_write_bw -d "$rxb" -x "$gb" -s 65536 -D "$secs" -F >/dev/null 2>&1 & pids+=($!)
sleep 1
bw=$(ib_write_bw -d "$rxa" -x "$ga" -s 65536 -D "$secs" -F "$b" 2>/dev/null |
	awk '$1 == 65536 {print $4}')
echo "verbs      ib_write_bw 64 KiB: ${bw:-?} MB/s" | tee -a "$out"
ibv_rc_pingpong -d "$rxb" -g "$gb" -s 64 -n 500 >/dev/null 2>&1 & pids+=($!)
sleep 1
lat=$(ibv_rc_pingpong -d "$rxa" -g "$ga" -s 64 -n 500 "$b" 2>/dev/null |
	awk '/usec\/iter/ {print $(NF-1)}')
echo "verbs      ibv_rc_pingpong 64 B: ${lat:-?} usec/iter" | tee -a "$out"

echo
echo "--- summary (ratios against the raw verbs ceiling and plain TCP)"
awk -v bw="${bw:-0}" -v lat="${lat:-0}" '
	/ stream / { for (i = 1; i <= NF; i++) if ($i == "MB/s") mbs[$1] = $(i + 1) }
	/ pingpong size 1 / { for (i = 1; i <= NF; i++) if ($i == "p50") rtt[$1] = $(i + 1) }
	END {
		for (t in mbs) printf "stream %-9s %8.2f MB/s  %5.2fx verbs ceiling  %5.2fx plain TCP\n",
			t, mbs[t], bw ? mbs[t] / bw : 0, mbs["plain"] ? mbs[t] / mbs["plain"] : 0
		for (t in rtt) printf "rtt 1 B %-8s %8.1f us    %5.2fx verbs rc_pingpong\n",
			t, rtt[t], lat ? rtt[t] / lat : 0
	}' "$out"
