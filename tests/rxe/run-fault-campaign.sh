#!/usr/bin/env bash
# The fault campaign (docs/faults.md) in one command: netem on
# the veth pair, the link down and up, peers SIGKILLed at each step, long
# runs with kills; usmc <-> usmc and usmc <-> the kernel's SMC-R in each
# role. Runs tests/fault_campaign of a build tree in the soft-RoCE guest,
# in as many guest sessions of at most --chunk seconds as it needs (the
# guest is shared: other people's runs get the lock between them), and
# prints the campaign's table (also written as table.md).
#
# Usage: tests/rxe/run-fault-campaign.sh [--full | --ci] [--build-dir D]
#                                        [--only REGEX] [--chunk S] [--list]
#   --ci        the sizes of the ctest subset (label rxe), all scenarios
#   --full      (default) 100 connections x 16 MiB each way with no fault
#               and with duplication, the lossy faults at the sizes of
#               their table row (FAULT_FULL_LOSSY_BYTES), 10,000 cycles
#   --only R    only the entries whose name matches the regular expression
#   --chunk S   guest seconds per session (default 780, each under 15 min)
#   --list      print the entries and their estimated guest time, run nothing
# Output: <build>/fault-campaign/<date>/{chunk-N.log,results.txt,table.md}
# Exit status: 0 if every entry passed.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$SRC/../.." && pwd)
MODE=full
BUILD=${USMC_BUILD_DIR:-$TOP/build}
ONLY=
CHUNK=780
LIST=0
while [ $# -gt 0 ]; do
	case "$1" in
	--full) MODE=full; shift ;;
	--ci) MODE=ci; shift ;;
	--build-dir) BUILD=${2:?}; shift 2 ;;
	--only) ONLY=${2:?}; shift 2 ;;
	--chunk) CHUNK=${2:?}; shift 2 ;;
	--list) LIST=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
	*) echo "run-fault-campaign: unknown option $1" >&2; exit 2 ;;
	esac
done
BUILD=$(cd "$BUILD" && pwd)
FC=$BUILD/tests/fault_campaign
KCTL=$BUILD/tests/smc_kctl
[ -x "$FC" ] && [ -x "$KCTL" ] || {
	echo "run-fault-campaign: build $FC and $KCTL first (make -C $BUILD)" >&2
	exit 2
}

# ---- the entries: name | estimated guest seconds | environment | arguments
ENTRIES=()
add() { ENTRIES+=("$1|$2|$3|$4"); }

if [ "$MODE" = ci ]; then
	L_CONNS=8 L_BYTES=262144 L_LOSSY=262144 CYCLES=500 KCYCLES=200
else
	L_CONNS=100 L_BYTES=16777216 L_LOSSY=${FAULT_FULL_LOSSY_BYTES:-1048576}
	CYCLES=10000 KCYCLES=10000
fi
# Seconds per MB (both ways, all connections) under each fault, measured in
# the guest (docs/faults.md; loss5: 0.40 MB/s at 100 x 1 MiB), for the
# chunking only.
declare -A SPMB=([none]=0.07 [dup2]=0.1 [loss1]=0.5 [loss5]=2.6 [reorder]=2.1 [corrupt1]=0.5)
for f in none loss1 loss5 dup2 reorder corrupt1; do
	b=$L_LOSSY
	case $f in none | dup2) b=$L_BYTES ;; esac
	mb=$((2 * L_CONNS * b / 1000000 + 1))
	est=$(awk -v m=$mb -v s="${SPMB[$f]}" 'BEGIN { printf "%d", m * s + 15 }')
	for p in u2u k2u u2k k2k; do
		add "lossy_${f}_$p" "$est" "FAULT_CONNS=$L_CONNS FAULT_BYTES=$b" "lossy $f $p"
	done
done
# the data path alone under loss, the fault applied once the connections
# are up: a kernel end's REG_MR, which its rxe can fail under loss
# (docs/faults.md), runs only at setup
if [ "$MODE" = full ]; then
	for f in loss1 loss5; do
		b=$L_LOSSY
		mb=$((2 * L_CONNS * b / 1000000 + 1))
		est=$(awk -v m=$mb -v s="${SPMB[$f]}" 'BEGIN { printf "%d", m * s + 15 }')
		for p in k2u u2k k2k; do
			add "lossy_${f}_${p}_data" "$est" "FAULT_CONNS=$L_CONNS FAULT_BYTES=$b FAULT_AFTER_SETUP=1" \
				"lossy $f $p"
		done
	done
fi
for p in u2u k2u u2k; do
	add "linkdown_$p" 40 "" "linkdown $p"
done
for p in u2u k2u u2k; do
	for v in server client; do
		for s in proposal accept confirm confirm_link data close closed; do
			add "kill_${p}_${v}_$s" 12 "" "kill $p $v $s"
		done
	done
done
add soak_u2u_server $((CYCLES / 40 + 20)) "FAULT_CYCLES=$CYCLES" "soak u2u server"
add soak_u2u_client $((CYCLES / 40 + 20)) "FAULT_CYCLES=$CYCLES" "soak u2u client"
add soak_k2u_server $((KCYCLES / 30 + 20)) "FAULT_CYCLES=$KCYCLES" "soak k2u server"
add soak_u2k_client $((KCYCLES / 30 + 20)) "FAULT_CYCLES=$KCYCLES" "soak u2k client"

SEL=()
total=0
for e in "${ENTRIES[@]}"; do
	IFS='|' read -r name est _ _ <<<"$e"
	[ -z "$ONLY" ] || [[ "$name" =~ $ONLY ]] || continue
	SEL+=("$e")
	total=$((total + est))
done
if [ "$LIST" = 1 ]; then
	for e in "${SEL[@]}"; do
		IFS='|' read -r name est env args <<<"$e"
		printf '%-34s %5d s  %s fault_campaign <smc_kctl> %s\n' "$name" "$est" "$env" "$args"
	done
	echo "${#SEL[@]} entries, about $total s of guest time ($MODE)"
	exit 0
fi
[ ${#SEL[@]} -gt 0 ] || { echo "run-fault-campaign: no entry matches" >&2; exit 2; }

OUT=$BUILD/fault-campaign/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
echo "run-fault-campaign: ${#SEL[@]} entries, about $total s of guest time, logs in $OUT" >&2

# ---- chunks: each one guest session
chunk=0
run_chunk() { # entries...
	local script=$OUT/chunk-$chunk.sh e name est env args
	{
		echo '#!/bin/bash'
		echo "cd /tmp"
		for e in "$@"; do
			IFS='|' read -r name est env args <<<"$e"
			echo "echo '=== BEGIN $name'"
			echo "t0=\$SECONDS"
			echo "env $env timeout -k 5 $((est * 3 + 60)) '$FC' '$KCTL' $args"
			echo "echo \"=== END $name rc=\$? secs=\$((SECONDS - t0))\""
		done
	} >"$script"
	chmod +x "$script"
	echo "run-fault-campaign: guest session $chunk ($# entries)" >&2
	"$SRC/vm-run.sh" --build-dir "$BUILD" --setup two --smc --timeout $((CHUNK + 120)) -- \
		"$script" 2>&1 | tee "$OUT/chunk-$chunk.log" | grep -E '^(=== |RESULT|FAIL)' || true
	chunk=$((chunk + 1))
}
batch=()
sum=0
for e in "${SEL[@]}"; do
	IFS='|' read -r name est _ _ <<<"$e"
	if [ ${#batch[@]} -gt 0 ] && [ $((sum + est)) -gt "$CHUNK" ]; then
		run_chunk "${batch[@]}"
		batch=()
		sum=0
	fi
	batch+=("$e")
	sum=$((sum + est))
done
[ ${#batch[@]} -eq 0 ] || run_chunk "${batch[@]}"

# ---- the table
cat "$OUT"/chunk-*.log | awk '
	/^=== BEGIN / { name = $3; res[name] = ""; rc[name] = "no result (guest timed out?)" }
	/^RESULT / { res[name] = substr($0, 8) }
	/^=== END / { split($4, a, "="); rc[name] = a[2] }
	END { for (n in rc) print n "\t" rc[n] "\t" res[n] }' | sort >"$OUT/results.txt"
awk -F'\t' '
	function kv(s, k,   i, n, a, b) {
		n = split(s, a, " ")
		for (i = 1; i <= n; i++) { split(a[i], b, "="); if (b[1] == k) return b[2] }
		return "-"
	}
	{ name[NR] = $1; rc[NR] = $2; r[NR] = $3
	  if (kv($3, "scenario") == "lossy" && kv($3, "pairing") == "k2k") kern[kv($3, "fault") "/" kv($3, "phase")] = kv($3, "mbps") }
	END {
		print "| entry | fault | pairing | connections | bytes checked | lost / corrupted | hangs | leaks | time to detect (s) | MB/s | vs kernel | outcome | result |"
		print "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
		for (i = 1; i <= NR; i++) {
			s = r[i]; f = kv(s, "fault"); m = kv(s, "mbps"); vs = "-"; fk = f "/" kv(s, "phase")
			if (kv(s, "scenario") == "lossy" && kv(s, "pairing") != "k2k" && (fk in kern) && kern[fk] > 0 && m != "-")
				vs = sprintf("%.2fx", m / kern[fk])
			c = kv(s, "conns"); if (kv(s, "opened") != "-" && kv(s, "scenario") != "soak") c = kv(s, "opened") "/" c
			oc = kv(s, "outcome")
			if (kv(s, "scenario") == "linkdown") oc = "new during: TCP x" kv(s, "during_tcp") ", after: " kv(s, "after")
			if (kv(s, "scenario") == "soak") oc = kv(s, "killed") " peers killed, " kv(s, "tcp_killed") " of their cycles TCP; fds " kv(s, "fds") ", qp " kv(s, "qp") ", RSS KiB " kv(s, "rss_kib") ", heap KiB " kv(s, "heap_kib")
			if (kv(s, "phase") == "data") f = f " (after setup)"
			printf "| %s | %s | %s%s | %s | %s | %s / %s | %s | %s | %s | %s | %s | %s | %s |\n", name[i], f, kv(s, "pairing"),
				kv(s, "victim") != "-" ? " (" kv(s, "victim") " killed)" : kv(s, "survivor") != "-" ? " (" kv(s, "survivor") " survives)" : "",
				c, kv(s, "bytes_checked"), kv(s, "lost"), kv(s, "corrupted"), kv(s, "hangs"), kv(s, "leaks"),
				kv(s, "detect_s"), m, vs, oc, rc[i] == "0" ? "pass" : "FAIL (" rc[i] ")"
		}
	}' "$OUT/results.txt" >"$OUT/table.md"
cat "$OUT/table.md"
fails=$(awk -F'\t' '$2 != "0"' "$OUT/results.txt" | wc -l)
echo "run-fault-campaign: $(wc -l <"$OUT/results.txt") entries, $fails failed; $OUT/table.md" >&2
[ "$fails" -eq 0 ]
