#!/usr/bin/env bash
# Storm of short-lived connections over soft-RoCE (the short-connection goal,
# docs/bench/README.md), all in one
# guest run: usmc_storm server on host B, its clients on host A, 64-byte
# request and response per connection, at each STORM_CLIENTS count, side by
# side:
#   (a) plain sockets, server and clients               (the baseline)
#   (b) usmc listener, auto-fallback off, usmc clients  (SMC-R over rxe)
#   (c) usmc listener, auto-fallback on (-f), usmc clients
#   (k) the Linux kernel's SMC-R: AF_SMC server, AF_SMC clients
#   (u) usmc listener, auto-fallback off, the kernel's AF_SMC clients
#   (f) usmc listener, auto-fallback on, the kernel's AF_SMC clients
# and three floors, only when STORM_ROWS names them: what a client costs
# when the server never offers SMC, the best an auto-fallback row can do,
# and what the usmc listener costs when no client asks for SMC:
#   (p) plain server, usmc clients    (the floor of (c))
#   (t) plain server, AF_SMC clients  (the floor of (f))
#   (s) usmc listener, auto-fallback on, plain clients (the server's floor)
# and, only when STORM_ROWS names them, (S) and (F): (s) and (f) with
# USMC_ACCEPT_DIRECT=0 at the server, every connection through its accept
# thread as before direct mode (docs/listener.md "Plain TCP"); the other
# usmc servers run with the default, direct mode on where kernel-compatible
# mode is. (U), only when named: (u) with the server polling each
# connection's usmc_conn_fd() (usmc_storm --conn-fd) instead of the event
# API, as every usmc server did before.
# STORM_ROUNDS rounds (rows alternating within a round); the table gives
# each figure's median over the rounds: req/s, errors (clients + server,
# summed), connect p50/p99, the client connections that ran SMC-R or TCP
# and the SMC-R share, "cong" (declined at once by a congested usmc
# listener), "hserr" (failed handshakes, either side: usmc counters, or the
# kernel's SMC statistics), the ratios to (a) and (k), and the cost per
# connection: the guest's CPU (see cpu_stats), its system calls and context
# switches per connection (perf stat -a over the client run: both ends,
# every thread, rxe's kernel threads), and the LLC messages on the link per
# SMC-R connection (the usmc ends' counters; "-" where both ends are the
# kernel); "budget": of "cong", those a usmc listener declined by its
# storm admission budget (docs/listener.md "Admission by cost").
# Then, unless STORM_WRK=0, wrk -t 2 -c 64 -H 'Connection: close'
# from host A against examples/httpd on host B: libusmc vs httpd -P.
# Each program's raw line (and its first failures, described) on stderr.
# Usage (host):
#   tests/rxe/vm-run.sh --setup two --smc -- $PWD/tools/bench-storm-rxe.sh $PWD/build [SECONDS=5]
# Client threads: usmc clients connect with USMC_CONNECT_ASYNC, each
# thread driving its connects' CLC handshakes from its own epoll loop, so
# they run from STORM_THREADS threads as the kernel's asynchronous AF_SMC
# connects and the plain ones do (before: one thread per usmc client, the
# handshake blocking in usmc_connect_finish()).
# Env: STORM_CLIENTS (default "64 256"), STORM_THREADS client threads (2),
#      STORM_USMC_THREADS of usmc clients (default: STORM_THREADS),
#      STORM_ROWS (default "a b c k u f": a subset, to look at one row;
#      "p", "t" and "s" add the floors, "S" and "F" the rows without
#      direct accept, "U" (u) with readiness descriptors),
#      STORM_ROUNDS (3), STORM_PERF (1; 0: no perf stat),
#      STORM_PROFILE (0; 1: perf record -a -g over each client run, and a
#      second table of where the busy CPU time goes, in % by kind of
#      work (tools/perf_cost_split.py): rxe, TCP connect/accept, TCP
#      send/recv, TCP close, AF_UNIX (readiness pairs), epoll, futex,
#      eventfd, the kernel's SMC, bpf, other system calls, irq, kernel
#      workers, user space, other kernel; "srv" the server process's part.
#      Sampling costs CPU: rates are lower than without it),
#      STORM_WRK (1; 0 skips wrk), STORM_WRK_ROUNDS (3, alternating),
#      STORM_PORT first port (18800), USMC_PROBE_MS (default here 1000).
# Exit 1 on any error (either side, wrk socket errors or non-2xx), when a
# usmc or kernel SMC row ran no connection over SMC-R, or on a setup failure.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common/rxe-env.sh"

BUILD=${1:?usage: bench-storm-rxe.sh BUILD_DIR [SECONDS]}
SECS=${2:-5}
CLIENTS=${STORM_CLIENTS:-64 256}
THREADS=${STORM_THREADS:-2}
USMC_THREADS=${STORM_USMC_THREADS:-}
ROWS=${STORM_ROWS:-a b c k u f}
ROUNDS=${STORM_ROUNDS:-3}
PERF=${STORM_PERF:-1}
PROFILE=${STORM_PROFILE:-0}
COST_SPLIT=$(dirname "${BASH_SOURCE[0]}")/perf_cost_split.py
WRK=${STORM_WRK:-1}
WRK_ROUNDS=${STORM_WRK_ROUNDS:-3}
PORT=${STORM_PORT:-18800}
STORM=$BUILD/tools/usmc_storm
HTTPD=$BUILD/examples/httpd
KCTL=$BUILD/tests/smc_kctl
A=$USMC_TEST_HOST_A B=$USMC_TEST_HOST_B
UEID=USMC-BENCH-STORM
SERVER_MAX=3600      # a server runs until we stop it
CLIENT_SLACK=60      # a client run may take SECS + drain + setup
STOP_WAIT=200        # x 0.1 s for a server to exit after SIGTERM
LISTEN_WAIT=300      # x 0.1 s for a server to listen
export USMC_PROBE_MS=${USMC_PROBE_MS:-1000} USMC_UEID=$UEID
OUT=$(mktemp -d)
PIDS=()
SRV_ENV=USMC_ACCEPT_DIRECT=1 # the server's, per row (run())
declare -A SYSCTL_SAVED=()
fail=0

cleanup() {
	local k
	for p in "${PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
	for k in "${!SYSCTL_SAVED[@]}"; do
		echo "${SYSCTL_SAVED[$k]}" >"/proc/sys/$k" 2>/dev/null || true
	done
	rm -rf "$OUT" "$RXE_TMP"
}
trap cleanup EXIT

die() {
	echo "bench-storm-rxe: $*" >&2
	exit 1
}

set_sysctl() { # key value: set for this run, restored on exit
	SYSCTL_SAVED[$1]=$(cat "/proc/sys/$1")
	echo "$2" >"/proc/sys/$1"
}

for f in "$STORM" "$HTTPD" "$KCTL"; do
	[ -x "$f" ] || die "$f missing: build first (cmake --build $BUILD)"
done
command -v wrk >/dev/null || die "wrk missing (tools/install-deps.sh)"
command -v ss >/dev/null || die "ss missing (iproute2)"
[ -e /proc/sys/net/smc ] || die "the kernel's smc module is not loaded (vm-run.sh --smc)"
[ "$A" != "$B" ] || die "hosts A and B are the same ($A): run with vm-run.sh --setup two"

# SMC-Rv2 over rxe needs a UEID on both ends: the kernel's, and usmc's
"$KCTL" ueid flush
"$KCTL" ueid add "$UEID"
# clients close first, so their TIME_WAITs pile up on host A: let new
# connections reuse them and give them every port
set_sysctl net/ipv4/tcp_tw_reuse 1
set_sysctl net/ipv4/ip_local_port_range "1024 65535"

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2"; }
num() { local v; v=$(field "$@") && echo "${v:-0}"; } # a count; 0 if missing
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# The guest's CPU over a row's client run (both hosts share its kernel, so
# this is clients, server, TCP and rxe together): "busy" the share of all
# CPUs in use, "ms/req" busy CPU time per request, "kern" the share of that
# in the kernel (system, irq, softirq: TCP and rxe's packet processing).
cpu_stats() { # row reqs: prints "busy ms/req kern"
	awk -v n="$2" 'NR == 1 { for (i = 2; i <= 9; i++) a[i] = $i }
		NR == 2 { for (i = 2; i <= 9; i++) d[i] = $i - a[i]
			tot = 0; for (i = 2; i <= 9; i++) tot += d[i]
			busy = tot - d[5] - d[6]; kern = d[4] + d[7] + d[8]
			printf "%.0f%% %.2f %.0f%%", (tot ? 100 * busy / tot : 0),
				(n ? busy * 10 / n : 0), (busy ? 100 * kern / busy : 0) }' \
		"$OUT/$1.stat0" "$OUT/$1.stat1"
}
# rows where one end is plain TCP, so no connection can run SMC-R
tcp_only_row() { [[ $1 == [aptsS] ]]; }
share() { awk -v s="$1" -v t="$2" 'BEGIN { if (s + t > 0) printf "%.1f%%", 100 * s / (s + t); else print "-" }'; }

# System calls and context switches of the whole guest over a client run:
# perf stat -a (both hosts share the guest's kernel: both ends, every
# thread, rxe's kernel work). PERF_PID while running.
PERF_PID=
perf_ok=0
if [ "$PERF" = 1 ] && command -v perf >/dev/null; then
	[ -e /sys/kernel/tracing/events/raw_syscalls ] ||
		mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
	perf stat -a -x, -e raw_syscalls:sys_enter,context-switches -o "$OUT/perf.probe" \
		-- true 2>/dev/null && perf_ok=1
	[ "$perf_ok" = 1 ] || echo "bench-storm-rxe: perf stat -a unusable here: no syscall counts" >&2
fi
perf_start() { # row
	[ "$perf_ok" = 1 ] || return 0
	perf stat -a -x, -e raw_syscalls:sys_enter,context-switches -o "$OUT/$1.perf" &
	PERF_PID=$!
	PIDS+=("$PERF_PID")
	sleep 0.2 # let it open its counters before the clients start
}
perf_stop() {
	[ -n "$PERF_PID" ] || return 0
	kill -INT "$PERF_PID" 2>/dev/null || true
	wait "$PERF_PID" 2>/dev/null || true
	PERF_PID=
}
# STORM_PROFILE=1: the client run under perf record; after it, the shares
# of its busy CPU time by kind of work in $OUT/ROW.split ("key share")
profile_cmd() { # row: the command prefix
	[ "$PROFILE" = 1 ] || return 0
	echo perf record -a -g -q -o "$OUT/$1.prof" --
}
profile_split() { # row server-pid
	[ "$PROFILE" = 1 ] || return 0
	perf script -i "$OUT/$1.prof" -F comm,pid,ip,sym 2>/dev/null |
		python3 "$COST_SPLIT" --server-pid "$2" >"$OUT/$1.split"
	rm -f "$OUT/$1.prof"
}
COST_KEYS="rxe tcp_conn tcp_io tcp_close unix epoll futex eventfd smc bpf syscall irq kwork user kernel srv"
perf_count() { # row event: the count, empty if none
	[ -s "$OUT/$1.perf" ] || return 0
	awk -F, -v e="$2" '$3 == e && $1 ~ /^[0-9]+$/ { print $1 }' "$OUT/$1.perf"
}
per() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.0f", a / b; else print "-" }'; }
per1() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.1f", a / b; else print "-" }'; }

wait_listen() { # port pid: 0 once something listens on B:port
	for _ in $(seq "$LISTEN_WAIT"); do
		kill -0 "$2" 2>/dev/null || return 1
		[ -z "$(ss -Hltn "src $B:$1")" ] || return 0
		sleep 0.1
	done
	return 1
}

stop_server() { # pid: SIGTERM, then wait for its exit; its exit code
	local pid=$1 rc=0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq "$STOP_WAIT"); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "bench-storm-rxe: server $pid did not stop within $((STOP_WAIT / 10)) s; killed" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" || rc=$?
	return "$rc"
}

# run ROW CLIENTS THREADS SERVER-ARGS -- CLIENT-ARGS: one storm on a fresh
# port; leaves the client's and the server's lines in $OUT/ROW.{cli,srv}
run() {
	local row=$1 c=$2 t=$3 srv_args=() cli_args=() port=$PORT pid rc=0 t0=$EPOCHREALTIME t1 t2
	shift 3
	while [ "$1" != -- ]; do srv_args+=("$1") && shift; done
	shift
	cli_args=("$@")
	PORT=$((PORT + 1))
	env "$SRV_ENV" "$STORM" -a "$B" -p "$port" -d "$SERVER_MAX" --client none "${srv_args[@]}" \
		>"$OUT/$row.srv" 2>"$OUT/$row.srv.err" &
	pid=$!
	PIDS+=("$pid")
	if ! wait_listen "$port" "$pid"; then
		cat "$OUT/$row.srv.err" >&2
		die "$row: server ${srv_args[*]} does not listen on $B:$port"
	fi
	t1=$EPOCHREALTIME
	perf_start "$row"
	head -1 /proc/stat >"$OUT/$row.stat0"
	# shellcheck disable=SC2046 # profile_cmd's words
	timeout -k 5 $((SECS + CLIENT_SLACK)) $(profile_cmd "$row") "$STORM" -a "$B" -p "$port" -d "$SECS" \
		-c "$c" -t "$t" --server none "${cli_args[@]}" \
		>"$OUT/$row.cli" 2>"$OUT/$row.cli.err" || rc=$?
	case $rc in
	0 | 3) ;; # 3: errors, counted below
	124 | 137) echo "bench-storm-rxe: $row: clients timed out ($((SECS + CLIENT_SLACK)) s)" >&2 ;;
	*) echo "bench-storm-rxe: $row: clients failed (exit $rc)" >&2 ;;
	esac
	[ "$rc" = 0 ] || [ "$rc" = 3 ] || fail=1
	rc=0
	head -1 /proc/stat >"$OUT/$row.stat1"
	perf_stop
	t2=$EPOCHREALTIME
	stop_server "$pid" || rc=$?
	profile_split "$row" "$pid"
	case $rc in
	0 | 3) ;;
	*) echo "bench-storm-rxe: $row: server exit $rc" >&2 && fail=1 ;;
	esac
	for f in cli srv; do # raw lines and anything the programs said
		echo "$row $f: $(cat "$OUT/$row.$f")" >&2
		[ ! -s "$OUT/$row.$f.err" ] || sed "s/^/$row $f stderr: /" "$OUT/$row.$f.err" >&2
	done
	echo "$row: server listening after $(secs "$t0" "$t1") s, clients $(secs "$t1" "$t2") s," \
		"server stop $(secs "$t2" "$EPOCHREALTIME") s" >&2
}

declare -A SRV=([a]="--server plain" [b]="--server usmc" [c]="--server usmc -f"
	[k]="--server smc" [u]="--server usmc" [f]="--server usmc -f"
	[p]="--server plain" [t]="--server plain" [s]="--server usmc -f"
	[S]="--server usmc -f" [F]="--server usmc -f" [U]="--server usmc --conn-fd")
declare -A CLI=([a]="--client plain" [b]="--client usmc" [c]="--client usmc"
	[k]="--client smc" [u]="--client smc" [f]="--client smc"
	[p]="--client usmc" [t]="--client smc" [s]="--client plain"
	[S]="--client plain" [F]="--client smc" [U]="--client smc")
declare -A NAME=([a]="(a) plain server+clients" [b]="(b) usmc, auto-fallback off"
	[c]="(c) usmc, auto-fallback on" [k]="(k) kernel SMC-R (AF_SMC)"
	[u]="(u) AF_SMC -> usmc, af off" [f]="(f) AF_SMC -> usmc, af on"
	[p]="(p) usmc -> plain server" [t]="(t) AF_SMC -> plain server"
	[s]="(s) plain -> usmc, af on"
	[S]="(S) (s), no direct accept" [F]="(F) (f), no direct accept"
	[U]="(U) (u), usmc_conn_fd() each")

echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg);" \
	"server on B $B, clients on A $A, ${SECS}s per run, $ROUNDS rounds (medians)," \
	"client threads $THREADS (usmc: ${USMC_THREADS:-$THREADS}, asynchronous connects)," \
	"USMC_PROBE_MS=$USMC_PROBE_MS"
summary=()
FMT='%-7s %-28s %7s %6s %8s %8s %6s %6s %6s %5s %5s %5s %5s %4s %6s %4s %6s %5s %5s %6s\n'
# shellcheck disable=SC2059 # the format is ours
printf "$FMT" clients run 'req/s' errors 'p50 us' 'p99 us' 'SMC-R' 'TCP' 'share' 'cong' \
	'hserr' 'vs(a)' 'vs(k)' busy ms/req kern 'sys/c' 'cs/c' 'llc/c' 'budget' >"$OUT/table"
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
# M[row.field] collects one value per round, space-separated
declare -A M=()
put() { M[$1.$2]="${M[$1.$2]:-} $3"; }
med() { tr ' ' '\n' <<<"${M[$1.$2]:-}" | grep -v '^$' | grep -v '^-$' | median; }
sum() { tr ' ' '\n' <<<"${M[$1.$2]:-}" | awk '{ s += $1 } END { print s + 0 }'; }
for c in $CLIENTS; do
	M=()
	for r in $(seq "$ROUNDS"); do
		for k in $ROWS; do
			t=$THREADS
			[ "${CLI[$k]}" != "--client usmc" ] || t=${USMC_THREADS:-$THREADS}
			row="$c$k$r"
			SRV_ENV=USMC_ACCEPT_DIRECT=1
			[[ $k != [SF] ]] || SRV_ENV=USMC_ACCEPT_DIRECT=0
			# shellcheck disable=SC2086 # word splitting wanted
			run "$row" "$c" "$t" ${SRV[$k]} -- ${CLI[$k]}
			cli=$(cat "$OUT/$row.cli") srv=$(cat "$OUT/$row.srv")
			reqs=$(num reqs "$cli")
			put "$k" rps "$(field req_per_s "$cli")"
			put "$k" errs $(($(num errors "$cli") + $(num srv_errors "$srv")))
			put "$k" smcr "$(num client_smcr "$cli")"
			put "$k" tcp "$(num client_tcp "$cli")"
			put "$k" p50 "$(field connect_p50_us "$cli")"
			put "$k" p99 "$(field connect_p99_us "$cli")"
			put "$k" cong "$(num srv_congested "$srv")"
			put "$k" budget "$(num srv_budget "$srv")"
			put "$k" hserr $(($(num client_hs_errors "$cli") + $(num hs_failed "$srv")))
			read -r busy msreq kern <<<"$(cpu_stats "$row" "$reqs")"
			put "$k" busy "${busy%\%}"
			put "$k" msreq "$msreq"
			put "$k" kern "${kern%\%}"
			put "$k" sysc "$(per "$(perf_count "$row" raw_syscalls:sys_enter)" "$reqs")"
			put "$k" csc "$(per1 "$(perf_count "$row" context-switches)" "$reqs")"
			# LLC messages on the link: each usmc end counts what it sent and
			# received; with usmc at both ends every message is counted twice
			llc=-
			case $k in
			b | c) llc=$(per1 "$((($(num llc_sent "$cli") + $(num llc_received "$cli") +
				$(num srv_llc_sent "$srv") + $(num srv_llc_received "$srv")) / 2))" \
				"$(num client_smcr "$cli")") ;;
			u | f | F | U) llc=$(per1 "$(($(num srv_llc_sent "$srv") + $(num srv_llc_received "$srv")))" \
				"$(num client_smcr "$cli")") ;;
			esac
			put "$k" llc "$llc"
			for key in $COST_KEYS; do # STORM_PROFILE=1: % of the busy CPU
				[ -s "$OUT/$row.split" ] || break
				put "$k" "cost_$key" "$(awk -v k="$key" \
					'$1 == k { printf "%.1f", $2 * 100 }' "$OUT/$row.split")"
			done
			echo "round $r $c clients ${NAME[$k]}: $(field req_per_s "$cli") req/s," \
				"$msreq ms/req, $(med "$k" sysc | tr -d '\n') sys/conn (median so far)" >&2
			if ! tcp_only_row "$k" && [ "$(num client_smcr "$cli")" = 0 ]; then
				echo "bench-storm-rxe: $c clients, ${NAME[$k]}, round $r: no connection ran SMC-R" >&2
				fail=1
			fi
		done
	done
	declare -A rps=()
	for k in $ROWS; do
		rps[$k]=$(med "$k" rps)
		[ "$(sum "$k" errs)" = 0 ] || fail=1
	done
	for k in $ROWS; do
		if tcp_only_row "$k"; then sh=- smc=- tc=-; else
			smc=$(med "$k" smcr) tc=$(med "$k" tcp) sh=$(share "$smc" "$tc")
		fi
		# shellcheck disable=SC2059 # the format is ours
		printf "$FMT" "$c" "${NAME[$k]}" "${rps[$k]}" "$(sum "$k" errs)" "$(med "$k" p50)" \
			"$(med "$k" p99)" "$smc" "$tc" "$sh" "$(med "$k" cong)" "$(sum "$k" hserr)" \
			"$(ratio "${rps[$k]}" "${rps[a]:-}")" "$(ratio "${rps[$k]}" "${rps[k]:-}")" \
			"$(med "$k" busy)%" "$(med "$k" msreq)" "$(med "$k" kern)%" "$(med "$k" sysc)" \
			"$(med "$k" csc)" "$(med "$k" llc)" "$(med "$k" budget)" >>"$OUT/table"
	done
	if [ "$PROFILE" = 1 ]; then
		{
			printf '%-7s %-28s' "$c" "% of busy CPU, by kind"
			printf ' %6s' ${COST_KEYS//tcp_/t.} && echo
			for k in $ROWS; do
				printf '%-7s %-28s' "$c" "${NAME[$k]}"
				for key in $COST_KEYS; do printf ' %6s' "$(med "$k" "cost_$key")"; done
				echo
			done
		} >>"$OUT/costs"
	fi
	line="$c clients:"
	for q in c/a b/a b/k c/k u/k f/a c/p f/t; do
		[ -n "${rps[${q%/*}]:-}" ] && [ -n "${rps[${q#*/}]:-}" ] || continue # a row not run
		line+=" (${q%/*})/(${q#*/}) $(ratio "${rps[${q%/*}]:-}" "${rps[${q#*/}]:-}"),"
	done
	summary+=("${line%,}")
	unset rps
done

# wrk from host A against httpd on host B: libusmc vs plain sockets
wrk_run() { # name httpd-flags...: req/s in $OUT/wrk.NAME; 1 on errors
	local name=$1 port=$PORT pid out bad
	shift
	PORT=$((PORT + 1))
	"$HTTPD" -a "$B" -p "$port" "$@" >"$OUT/httpd.$name" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	wait_listen "$port" "$pid" || die "httpd $*: does not listen on $B:$port: $(cat "$OUT/httpd.$name")"
	out=$(wrk -t 2 -c 64 -d "${SECS}s" -H 'Connection: close' "http://$B:$port/" 2>&1) || true
	stop_server "$pid" >/dev/null 2>&1 || true
	sed "s/^/wrk $name: /" <<<"$out" >&2
	awk '/Requests\/sec/ { print $2 }' <<<"$out" >"$OUT/wrk.$name"
	bad=$(grep -E 'Socket errors|Non-2xx' <<<"$out" || true)
	[ -z "$bad" ] || { echo "bench-storm-rxe: wrk against httpd $*: $bad" >&2 && return 1; }
	[ -s "$OUT/wrk.$name" ] || { echo "bench-storm-rxe: wrk against httpd $* failed" >&2 && return 1; }
}
if [ "$WRK" = 1 ]; then
	# alternating rounds, medians: single TCG runs vary by up to 40 %
	for r in $(seq "$WRK_ROUNDS"); do
		wrk_run "plain$r" -P || fail=1
		wrk_run "usmc$r" || fail=1
		echo "wrk round $r: plain $(cat "$OUT/wrk.plain$r"), usmc $(cat "$OUT/wrk.usmc$r")" >&2
	done
	wplain=$(cat "$OUT"/wrk.plain* | median) wusmc=$(cat "$OUT"/wrk.usmc* | median)
fi

echo
cat "$OUT/table"
echo
if [ -s "$OUT/costs" ]; then
	echo "Where the busy CPU time goes (% of it, medians; perf record -a -g," \
		"tools/perf_cost_split.py; srv: the server process's part; the profiler's" \
		"own samples left out, but sampling slows every row: take ms/req from a run without it):"
	cat "$OUT/costs"
	echo
fi
printf '%s\n' "${summary[@]}"
if [ "$WRK" = 1 ]; then
	echo
	echo "wrk -t 2 -c 64 -d ${SECS}s -H 'Connection: close', host A -> examples/httpd on host B" \
		"(median of $WRK_ROUNDS alternating rounds):"
	printf '  httpd -P (plain sockets)   %10s req/s\n' "${wplain:-?}"
	printf '  httpd (libusmc)            %10s req/s  ratio %s\n' "${wusmc:-?}" \
		"$(ratio "${wusmc:-0}" "${wplain:-0}")"
fi
[ "$fail" = 0 ] || echo "bench-storm-rxe: FAILED (errors above)" >&2
exit "$fail"
