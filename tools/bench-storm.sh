#!/usr/bin/env bash
# Storm of short-lived connections, side by side in one run:
#   (a) plain sockets, server and clients         (the baseline)
#   (b) usmc listener, auto-fallback off
#   (c) usmc listener, auto-fallback on
# at 64 and 256 clients, each with usmc clients (which send no CLC without
# an RDMA device) and with simulated SMC clients ("clc": every connection
# sends a Linux v2 PROPOSAL and gets a DECLINE, a real server handshake);
# then wrk -H 'Connection: close' against examples/httpd over libusmc vs
# httpd -P (plain sockets). Prints ratios to (a).
#
# usage: tools/bench-storm.sh BUILD_DIR [SECONDS=5]
# env:   STORM_ADDR (default 127.0.0.1)  address to bind and connect
#        STORM_CLIENTS (default "64 256")
#        USMC_PROBE_MS (default here 1000, see docs/listener.md "Probe")
set -euo pipefail
build=$(realpath "${1:?usage: bench-storm.sh BUILD_DIR [SECONDS]}")
secs=${2:-5}
addr=${STORM_ADDR:-127.0.0.1}
clients=${STORM_CLIENTS:-64 256}
export USMC_PROBE_MS=${USMC_PROBE_MS:-1000}
storm=$build/tools/usmc_storm
httpd=$build/examples/httpd

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

run() { # label args...
	local label=$1
	shift
	local out
	out=$("$storm" -a "$addr" -p 0 -d "$secs" "$@")
	echo "$label: $out" >&2
	echo "$out"
}

printf '%-5s %-6s %-30s %10s %7s %9s %9s %9s %6s\n' clients client run 'req/s' errors 'p50 us' 'p99 us' 'busy' ratio
fail=0
for c in $clients; do
	for cl in usmc clc; do
		# the baseline's clients are plain sockets either way
		a=$(run "a $c" -c "$c" --server plain --client plain)
		b=$(run "b $c $cl" -c "$c" --server usmc --client "$cl")
		f=$(run "c $c $cl" -c "$c" --server usmc --client "$cl" -f)
		base=$(field req_per_s "$a")
		for r in "a:plain server+clients:$a" "b:usmc auto-fallback off:$b" "c:usmc auto-fallback on:$f"; do
			IFS=: read -r tag name out <<<"$r"
			printf '%-5s %-6s %-30s %10s %7s %9s %9s %9s %6s\n' "$c" "$cl" "($tag) $name" \
				"$(field req_per_s "$out")" "$(field errors "$out")" \
				"$(field connect_p50_us "$out")" "$(field connect_p99_us "$out")" \
				"$(field declined_busy "$out")" "$(ratio "$(field req_per_s "$out")" "$base")"
			[ "$(field errors "$out")" = 0 ] || fail=1
		done
	done
done

# wrk: Connection: close against httpd on libusmc vs plain sockets
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("'"$addr"'",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do nc -z "$addr" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
wrk_rps() { # httpd flags...; prints req/s, or "errors" on socket errors
	local port out pid
	port=$(free_port)
	"$httpd" -a "$addr" -p "$port" "$@" >/dev/null &
	pid=$!
	wait_port "$port"
	out=$(wrk -t 2 -c 64 -d "${secs}s" -H 'Connection: close' "http://$addr:$port/")
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	if grep -q 'Socket errors' <<<"$out"; then
		echo "wrk $*: $(grep 'Socket errors' <<<"$out")" >&2
		echo errors
		return
	fi
	awk '/Requests\/sec/ { print $2 }' <<<"$out"
}
plain=$(wrk_rps -P)
usmc=$(wrk_rps)
usmc_af=$(wrk_rps -f)
for v in "$plain" "$usmc" "$usmc_af"; do [ "$v" != errors ] || fail=1; done
echo
printf 'wrk -c 64 -H "Connection: close" vs examples/httpd:\n'
printf '  httpd -P (plain sockets)        %10s req/s\n' "$plain"
printf '  httpd (libusmc)                 %10s req/s  ratio %s\n' "$usmc" "$(ratio "$usmc" "$plain")"
printf '  httpd -f (libusmc, auto-fb)     %10s req/s  ratio %s\n' "$usmc_af" "$(ratio "$usmc_af" "$plain")"
exit $fail
