#!/usr/bin/env bash
# wrk against examples/httpd on libusmc and on plain sockets, in one run,
# side by side, with the ratio. Keep-alive by default; -c for Connection: close.
#
#   tools/bench-httpd.sh [-b BUILD] [-c] [-t SECONDS] [-n CONNS] [-a ADDR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build close=0 secs=5 conns=100 addr=127.0.0.1
while getopts "b:ct:n:a:" o; do
	case $o in
	b) build=$OPTARG ;; c) close=1 ;; t) secs=$OPTARG ;; n) conns=$OPTARG ;; a) addr=$OPTARG ;;
	*) exit 2 ;;
	esac
done
httpd=$build/examples/httpd
[ -x "$httpd" ] || { echo "build $httpd first" >&2; exit 2; }
hdr=()
[ "$close" = 1 ] && hdr=(-H 'Connection: close')

# one server at a time, so each gets the same CPU
run() { # label port httpd-args...
	local label=$1 port=$2
	shift 2
	"$httpd" -a "$addr" -p "$port" "$@" >/dev/null &
	local pid=$!
	for _ in $(seq 100); do nc -z "$addr" "$port" 2>/dev/null && break; sleep 0.05; done
	local out
	out=$(wrk -t 2 -c "$conns" -d "${secs}s" "${hdr[@]}" "http://$addr:$port/")
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	local rps errs
	rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
	errs=$(grep -E 'Socket errors|Non-2xx' <<<"$out" || echo "0 socket errors")
	printf '%-22s %12s req/s   %s\n' "$label" "$rps" "$errs" >&2
	echo "$rps"
}
echo "wrk -t 2 -c $conns -d ${secs}s ${hdr[*]} against examples/httpd on $addr" >&2
plain=$(run "plain sockets (-P)" 18480 -P)
usmc=$(run "libusmc" 18481)
usmc_tcp=$(run "libusmc TCP only (-t)" 18482 -t)
awk -v u="$usmc" -v p="$plain" -v t="$usmc_tcp" 'BEGIN {
	printf "ratio libusmc / plain          = %.3f\n", u / p
	printf "ratio libusmc TCP-only / plain = %.3f\n", t / p }'
