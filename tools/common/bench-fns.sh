# shellcheck shell=bash
# Sourced by the soft-RoCE benchmarks (tools/bench-rxe.sh, bench-interop.sh,
# bench-rtt-ab.sh): running clients, and the medians and ratios of their
# "key=value" result lines.

retry() { # command...: run a client until its server listens
	for _ in $(seq 50); do "$@" && return 0; sleep 0.2; done
	return 1
}

# vals PAIR KEY: KEY's value in $OUT/PAIR.R for each round R of $ROUNDS
# (the first line that has it), one per line
vals() { for r in $(seq "$ROUNDS"); do sed -n "s/.* $2=\([0-9.]*\).*/\1/p" "$OUT/$1.$r" | head -1; done; }

# med PAIR KEY: the median of vals PAIR KEY, n/a if there is none
med() { vals "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "n/a" }'; }

# ratio A B: A / B with two decimals, n/a unless B > 0
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

# perftest_mbps FILE: the average bandwidth of ib_write_bw's 64 KiB line in
# FILE, in MB/s of 10^6 bytes as usmc_bench counts them; perftest's
# "MB/sec" are MiB (its format_factor 0x100000)
perftest_mbps() { awk '$1 == 65536 { printf "%.2f", $4 * 1.048576 }' "$1"; }
