#!/usr/bin/env bash
# Storm of short-lived connections, side by side in one run:
#   (a) plain sockets, server and clients         (the baseline)
#   (b) usmc listener, auto-fallback off
#   (c) usmc listener, auto-fallback on
#   (d) as (c) with USMC_DEFER_ACCEPT=1 (TCP_DEFER_ACCEPT, opt-in)
#   (e), (g) as (b), (c) with USMC_ACCEPT_DIRECT=0: every connection through
#       the accept thread, as before direct mode (only with STORM_ROWS; the
#       difference needs kernel-compat mode, docs/listener.md "Plain TCP")
# at 64 and 256 clients, each with plain TCP clients (what the listener
# sees from a usmc client without an RDMA device, too) and with simulated
# SMC clients ("clc": every connection sends a Linux v2 PROPOSAL and gets a
# DECLINE, a real server handshake; (a) keeps plain clients, so these rows
# include the CLC round trip that plain TCP does not pay);
# then wrk -H 'Connection: close' against examples/httpd over libusmc vs
# httpd -P (plain sockets). The configurations alternate, ROUNDS times;
# the table gives the median req/s of each and its ratio to (a)'s median,
# errors summed over the rounds.
#
# usage: tools/bench-storm.sh BUILD_DIR [SECONDS=3]
# env:   STORM_ADDR     address to bind and connect (default 127.0.0.1)
#        STORM_CLIENTS  client counts (default "64 256")
#        STORM_KINDS    client kinds for (b), (c) (default "plain clc"; also usmc)
#        ROUNDS         rounds (default 3)
#        STORM_ROWS     rows (default "a b c d"; e.g. "a e b g c")
#        STORM_WRK      0: no wrk part
#        USMC_PROBE_MS  default here 1000 (docs/listener.md, "Probe timeout")
set -euo pipefail
build=$(realpath "${1:?usage: bench-storm.sh BUILD_DIR [SECONDS]}")
secs=${2:-3}
addr=${STORM_ADDR:-127.0.0.1}
clients=${STORM_CLIENTS:-64 256}
rounds=${ROUNDS:-3}
kinds=${STORM_KINDS:-plain clc}
rows=${STORM_ROWS:-a b c d}
export USMC_PROBE_MS=${USMC_PROBE_MS:-1000}
storm=$build/tools/usmc_storm
httpd=$build/examples/httpd
fail=0

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg); ${secs}s x $rounds rounds, USMC_PROBE_MS=$USMC_PROBE_MS"
# cpu/req, csw/req: the storm process's CPU time (us) and context switches
# per request over the client run: clients and server together, so rows
# differ by what their server costs
printf '%-7s %-6s %-28s %9s %7s %8s %8s %9s %6s %8s %7s\n' clients client run 'req/s' errors 'p50 us' 'p99 us' 'busy' ratio 'cpu/req' 'csw/req'
declare -A args=(
	[a]="--server plain --client plain"
	[b]="--server usmc --client CL"
	[c]="--server usmc --client CL -f"
	[d]="--server usmc --client CL -f"
	[e]="--server usmc --client CL"
	[g]="--server usmc --client CL -f"
)
declare -A names=([a]="(a) plain server+clients" [b]="(b) usmc, auto-fallback off"
	[c]="(c) usmc, auto-fallback on" [d]="(d) (c) + defer accept 1 s"
	[e]="(e) (b), no direct accept" [g]="(g) (c), no direct accept")
for c in $clients; do
	for cl in $kinds; do
		declare -A rps=() errs=() p50=() p99=() busy=() cpu=() csw=()
		for _ in $(seq "$rounds"); do
			for k in $rows; do
				defer=0 direct=1
				[ "$k" != d ] || defer=1
				[ "$k" != e ] && [ "$k" != g ] || direct=0
				# shellcheck disable=SC2086 # word splitting wanted
				# simulated SMC clients follow the userspace-only rule
				kc=${USMC_KERNEL_COMPAT:-auto}
				[ "$cl" != clc ] || kc=0
				out=$(USMC_KERNEL_COMPAT=$kc USMC_DEFER_ACCEPT=$defer USMC_ACCEPT_DIRECT=$direct "$storm" -a "$addr" -p 0 -d "$secs" -c "$c" ${args[$k]//CL/$cl}) ||
					[ $? = 3 ] # errors: counted below
				echo "$c $cl $k: $out" >&2
				rps[$k]="${rps[$k]:-} $(field req_per_s "$out")"
				errs[$k]=$((${errs[$k]:-0} + $(field errors "$out")))
				p50[$k]="${p50[$k]:-} $(field connect_p50_us "$out")"
				p99[$k]="${p99[$k]:-} $(field connect_p99_us "$out")"
				busy[$k]=$((${busy[$k]:-0} + $(field declined_busy "$out")))
				cpu[$k]="${cpu[$k]:-} $(field cpu_us_per_req "$out")"
				csw[$k]="${csw[$k]:-} $(field csw_per_req "$out")"
			done
		done
		base=$(median <<<"${rps[a]}")
		for k in $rows; do
			m=$(median <<<"${rps[$k]}")
			printf '%-7s %-6s %-28s %9s %7s %8s %8s %9s %6s %8s %7s\n' "$c" "$cl" "${names[$k]}" "$m" \
				"${errs[$k]}" "$(median <<<"${p50[$k]}")" "$(median <<<"${p99[$k]}")" \
				"${busy[$k]}" "$(ratio "$m" "$base")" "$(median <<<"${cpu[$k]}")" \
				"$(median <<<"${csw[$k]}")"
			[ "${errs[$k]}" = 0 ] || fail=1
		done
		unset rps errs p50 p99 busy cpu csw
	done
done

[ "${STORM_WRK:-1}" != 0 ] || exit $fail

# wrk: Connection: close against httpd on libusmc vs plain sockets
free_port() { python3 -c 'import socket, sys; s=socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$addr"; }
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
declare -A w=()
for _ in $(seq "$rounds"); do
	for k in P U F D; do
		case $k in
		P) r=$(wrk_rps -P) ;;
		U) r=$(wrk_rps) ;;
		F) r=$(wrk_rps -f) ;;
		D) r=$(USMC_DEFER_ACCEPT=1 wrk_rps) ;;
		esac
		echo "httpd $k: $r" >&2
		[ "$r" != errors ] || { fail=1; r=0; }
		w[$k]="${w[$k]:-} $r"
	done
done
plain=$(median <<<"${w[P]}")
usmc=$(median <<<"${w[U]}")
usmc_af=$(median <<<"${w[F]}")
usmc_d=$(median <<<"${w[D]}")
echo
echo "wrk -t 2 -c 64 -H 'Connection: close' against examples/httpd (median of $rounds):"
printf '  httpd -P (plain sockets)      %10s req/s\n' "$plain"
printf '  httpd (libusmc)               %10s req/s  ratio %s\n' "$usmc" "$(ratio "$usmc" "$plain")"
printf '  httpd -f (libusmc, auto-fb)   %10s req/s  ratio %s\n' "$usmc_af" "$(ratio "$usmc_af" "$plain")"
printf '  httpd, USMC_DEFER_ACCEPT=1    %10s req/s  ratio %s\n' "$usmc_d" "$(ratio "$usmc_d" "$plain")"
exit $fail
