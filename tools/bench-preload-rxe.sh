#!/usr/bin/env bash
# Unmodified servers over SMC-R, side by side in one guest run (docs/preload.md
# "Measured"): nginx and redis-server on host B, wrk and redis-benchmark on
# host A, with each end run one of three ways:
#   plain   the program as it is (TCP)
#   kernel  under build/tools/libksmc-preload.so: the kernel's SMC (AF_SMC),
#           as smc-tools' smc_run runs it
#   usmc    under usmc_run (libusmc-preload.so), configured by nothing but
#           an exported USMC_UEID (no env directive in nginx.conf)
# Rows (server <- clients):
#   (a) plain  <- plain    the TCP baseline
#   (k) kernel <- kernel   the kernel's SMC-R on both ends
#   (u) usmc   <- kernel   usmc_run nginx, the kernel's AF_SMC clients
#   (U) usmc   <- usmc     usmc_run on both ends
#   (f) usmc_run -f (auto-fallback) <- plain
# nginx: one worker (PRELOAD_WORKERS), a 64-byte file, wrk -t1 -c CONNS for
# SECONDS, with "Connection: close" (close) and with keep-alive (ka); redis:
# redis-benchmark -c REDIS_CLIENTS -t set,get -n REDIS_N (rows a k u U).
# Each server is started for one measurement and stopped after it, so its
# counters are that measurement's; rows alternate within a round, ROUNDS
# rounds, the table gives medians. Per row the SMC-R share of the server's
# accepted connections and of the clients' connects: a usmc end's from its
# usmc_run -v summary at exit, a kernel end's from the kernel's SMC
# statistics (smc_kctl stats: SMC-R handshakes and fallbacks; both hosts
# share the guest's kernel, whose counters keep client and server apart).
# Usage (host):
#   tests/rxe/vm-run.sh --build-dir build --setup two --smc -- \
#     $PWD/tools/bench-preload-rxe.sh $PWD/build [SECONDS=5]
# Env: PRELOAD_ROWS ("a k u U f"), PRELOAD_ROUNDS (3), PRELOAD_CONNS (64),
#      PRELOAD_WORKERS (1), PRELOAD_TESTS ("close ka redis"),
#      REDIS_CLIENTS (50), REDIS_N (20000), PRELOAD_PORT (18900).
# Exit 1 on a setup failure, on client errors (wrk socket errors or non-2xx,
# redis-benchmark errors) and when a row that should run SMC-R ran none.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common/rxe-env.sh"

BUILD=$(readlink -f "${1:?usage: bench-preload-rxe.sh BUILD_DIR [SECONDS]}")
SECS=${2:-5}
ROWS=${PRELOAD_ROWS:-a k u U f}
ROUNDS=${PRELOAD_ROUNDS:-3}
CONNS=${PRELOAD_CONNS:-64}
WORKERS=${PRELOAD_WORKERS:-1}
TESTS=${PRELOAD_TESTS:-close ka redis}
REDIS_CLIENTS=${REDIS_CLIENTS:-50}
REDIS_N=${REDIS_N:-20000}
PORT=${PRELOAD_PORT:-18900}
USMC_RUN=$BUILD/tools/usmc_run
KSMC=$BUILD/tools/libksmc-preload.so
KCTL=$BUILD/tests/smc_kctl
A=$USMC_TEST_HOST_A B=$USMC_TEST_HOST_B
UEID=USMC-BENCH-PRELOAD
LISTEN_WAIT=300 # x 0.1 s for a server to listen
STOP_WAIT=300   # x 0.1 s for it to exit
OUT=$(mktemp -d)
chmod a+rx "$OUT" # nginx's worker runs as its user
SRV_PID=
fail=0

cleanup() {
	[ -z "$SRV_PID" ] || kill -KILL "$SRV_PID" 2>/dev/null || true
	rm -rf "$OUT" "$RXE_TMP"
}
trap cleanup EXIT

die() {
	echo "bench-preload-rxe: $*" >&2
	exit 1
}

for f in "$USMC_RUN" "$KSMC" "$KCTL"; do
	[ -e "$f" ] || die "$f missing: build first (cmake --build $BUILD)"
done
for p in nginx wrk redis-server redis-benchmark ss; do
	command -v "$p" >/dev/null || die "$p missing (tools/install-deps.sh)"
done
[ -e /proc/sys/net/smc ] || die "the kernel's smc module is not loaded (vm-run.sh --smc)"
[ "$A" != "$B" ] || die "hosts A and B are the same ($A): run with vm-run.sh --setup two"

# SMC-Rv2 over rxe needs a UEID on both ends: the kernel's, and usmc's (the
# one setting a usmc_run user gives)
"$KCTL" ueid flush
"$KCTL" ueid add "$UEID"
export USMC_UEID=$UEID

mkdir -p "$OUT/www" "$OUT/tmp"
head -c 64 /dev/zero | tr '\0' x >"$OUT/www/index.html"
chmod -R a+rX "$OUT/www"
cat >"$OUT/nginx.conf" <<NGX
daemon off;
master_process on;
worker_processes $WORKERS;
error_log $OUT/nginx-error.log warn;
pid $OUT/nginx.pid;
events { worker_connections 4096; }
http {
	access_log off;
	keepalive_requests 1000000;
	client_body_temp_path $OUT/tmp;
	proxy_temp_path $OUT/tmp;
	fastcgi_temp_path $OUT/tmp;
	uwsgi_temp_path $OUT/tmp;
	scgi_temp_path $OUT/tmp;
	server { listen $B:$PORT; root $OUT/www; }
}
NGX

# ends ROW: "SERVER_WAY CLIENT_WAY" of a row
ends() {
	case $1 in
	a) echo "plain plain" ;;
	k) echo "kernel kernel" ;;
	u) echo "usmc kernel" ;;
	U) echo "usmc usmc" ;;
	f) echo "usmc-f plain" ;;
	*) die "unknown row $1" ;;
	esac
}

# way WAY LOG -- COMMAND...: becomes COMMAND run the WAY way (exec: in
# the background its pid is $!, and signals reach it), a usmc end's summary
# at exit into LOG; call it in a subshell
way() {
	local w=$1 log=$2
	shift 3
	case $w in
	plain) exec "$@" ;;
	kernel) LD_PRELOAD=$KSMC exec "$@" ;;
	usmc) exec "$USMC_RUN" -v -o "$log" "$@" ;;
	usmc-f) exec "$USMC_RUN" -v -f -o "$log" "$@" ;;
	esac
}

listening() { ss -Hltn "src $B:$PORT" | grep -q .; }

# start_server WAY PROGRAM LOG: starts nginx or redis-server on B:PORT
start_server() {
	local w=$1 prog=$2 log=$3
	if [ "$prog" = nginx ]; then
		way "$w" "$log" -- nginx -p "$OUT" -c "$OUT/nginx.conf" >>"$OUT/server.out" 2>&1 &
	else
		way "$w" "$log" -- redis-server --port "$PORT" --bind "$B" --protected-mode no \
			--save "" --appendonly no --dir "$OUT" >>"$OUT/server.out" 2>&1 &
	fi
	SRV_PID=$!
	for _ in $(seq $LISTEN_WAIT); do
		listening && return 0
		kill -0 "$SRV_PID" 2>/dev/null || break
		sleep 0.1
	done
	tail -n 20 "$OUT/server.out" >&2
	die "$prog ($w) did not listen on $B:$PORT"
}

# stop_server: SIGTERM, which nginx and redis-server end with exit(), so
# that a usmc end's summary is written
stop_server() {
	kill -TERM "$SRV_PID" 2>/dev/null || true
	for _ in $(seq $STOP_WAIT); do
		kill -0 "$SRV_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$SRV_PID" 2>/dev/null || true
	wait "$SRV_PID" 2>/dev/null || true
	SRV_PID=
	for _ in $(seq $STOP_WAIT); do # a worker may outlive its master briefly
		listening || return 0
		sleep 0.1
	done
	die "the server still listens on $B:$PORT"
}

# usmc_sum LOG KIND WAY: the connections a usmc end's summaries in LOG count
# as accepted (KIND accepted) or connected (KIND connected), WAY SMC-R or TCP
usmc_sum() {
	local re
	if [ "$2" = accepted ]; then re="accepted ([0-9]+) SMC-R, ([0-9]+) TCP"; else
		re="connected ([0-9]+) SMC-R, ([0-9]+) TCP"
	fi
	sed -En "s/.*$re.*/\1 \2/p" "$1" 2>/dev/null |
		awk -v w="$3" '{ s += (w == "SMC-R" ? $1 : $2) } END { print s + 0 }'
}

kstat() { sed -n "s/.*\<$1=\([0-9]*\).*/\1/p" <<<"$2"; }

# measure ROW TEST ROUND: one measurement; its result line in
# $OUT/ROW.TEST.ROUND as key=value
measure() {
	local row=$1 test=$2 r=$3 srv cli prog k0 k1 out rps errors=0 slog clog
	read -r srv cli <<<"$(ends "$row")"
	slog=$OUT/srv.$row.$test.$r.log clog=$OUT/cli.$row.$test.$r.log
	prog=nginx
	[ "$test" = redis ] && prog=redis-server
	start_server "$srv" "$prog" "$slog"
	k0=$("$KCTL" stats)
	case $test in
	close | ka)
		local hdr=()
		[ "$test" = close ] && hdr=(-H "Connection: close")
		out=$(way "$cli" "$clog" -- wrk -t1 -c"$CONNS" -d"${SECS}s" "${hdr[@]}" \
			"http://$B:$PORT/index.html" 2>&1) || true
		rps=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' <<<"$out")
		if grep -qE "Socket errors|Non-2xx" <<<"$out"; then
			errors=$(sed -En 's/.*(Socket errors: .*|Non-2xx.*: *([0-9]+)).*/\1/p' <<<"$out" |
				grep -oE '[0-9]+' | awk '{ s += $1 } END { print s + 0 }')
		fi
		;;
	redis)
		out=$(way "$cli" "$clog" -- redis-benchmark -h "$B" -p "$PORT" -c "$REDIS_CLIENTS" \
			-n "$REDIS_N" -t set,get -q 2>&1) || errors=1
		out=$(tr '\r' '\n' <<<"$out")
		grep -qi error <<<"$out" && errors=$((errors + 1))
		# one figure per command: SET and GET apart
		rps="$(sed -En 's/^SET: ([0-9.]+) requests per second.*/\1/p' <<<"$out")"
		rps="$rps $(sed -En 's/^GET: ([0-9.]+) requests per second.*/\1/p' <<<"$out")"
		;;
	esac
	k1=$("$KCTL" stats)
	stop_server
	[ -n "${rps// /}" ] || {
		echo "--- $row $test round $r: no result" >&2
		tail -n 15 <<<"$out" >&2
		errors=$((errors + 1))
	}
	local s_smc s_tcp c_smc c_tcp
	case $srv in
	usmc*)
		s_smc=$(usmc_sum "$slog" accepted SMC-R) s_tcp=$(usmc_sum "$slog" accepted TCP) ;;
	kernel)
		s_smc=$(($(kstat srv_smcr "$k1") - $(kstat srv_smcr "$k0")))
		s_tcp=$(($(kstat srv_fback "$k1") - $(kstat srv_fback "$k0"))) ;;
	*) s_smc=0 s_tcp=- ;;
	esac
	case $cli in
	usmc)
		c_smc=$(usmc_sum "$clog" connected SMC-R) c_tcp=$(usmc_sum "$clog" connected TCP) ;;
	kernel)
		c_smc=$(($(kstat clnt_smcr "$k1") - $(kstat clnt_smcr "$k0")))
		c_tcp=$(($(kstat clnt_fback "$k1") - $(kstat clnt_fback "$k0"))) ;;
	*) c_smc=0 c_tcp=- ;;
	esac
	read -r set get <<<"$rps"
	if [ "$test" = redis ]; then
		echo "row=$row test=set rps=${set:-0} errors=$errors s_smc=$s_smc s_tcp=$s_tcp c_smc=$c_smc c_tcp=$c_tcp" \
			>"$OUT/$row.set.$r"
		echo "row=$row test=get rps=${get:-0} errors=$errors s_smc=$s_smc s_tcp=$s_tcp c_smc=$c_smc c_tcp=$c_tcp" \
			>"$OUT/$row.get.$r"
	else
		echo "row=$row test=$test rps=${rps:-0} errors=$errors s_smc=$s_smc s_tcp=$s_tcp c_smc=$c_smc c_tcp=$c_tcp" \
			>"$OUT/$row.$test.$r"
	fi
	if [ "$test" = redis ]; then cat "$OUT/$row.set.$r" "$OUT/$row.get.$r"; else
		cat "$OUT/$row.$test.$r"
	fi >&2
	# why a usmc end's connections fell back, from its summaries
	cat "$slog" "$clog" 2>/dev/null | sed -En 's/^usmc_run\[[0-9]+\] (.*): (fallback .*)/  \1: \2/p' |
		sort | uniq -c >&2 || true
	[ "$errors" = 0 ] || fail=1
}

# a row left out of PRELOAD_ROWS (the baseline a, say) has no values: n/a
vals() {
	for r in $(seq "$ROUNDS"); do
		[ ! -e "$OUT/$1.$r" ] || sed -n "s/.* $2=\([0-9.]*\).*/\1/p" "$OUT/$1.$r"
	done
}
med() { vals "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "n/a" }'; }
sum() { vals "$@" | awk '{ s += $1 } END { print s + 0 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else print "n/a" }'; }
share() { # SMC-R count, TCP count: the SMC-R share in %, "-" for a plain end
	awk -v s="$1" -v t="$2" 'BEGIN { if (t == "-" || s + t == 0) print "-"; else printf "%.1f", 100 * s / (s + t) }'
}

echo "bench-preload-rxe: $(uname -r), $(nproc) CPUs; rows: $ROWS; tests: $TESTS;" \
	"${SECS}s x $ROUNDS rounds; wrk -t1 -c$CONNS; nginx workers $WORKERS;" \
	"redis-benchmark -c $REDIS_CLIENTS -n $REDIS_N" >&2
for r in $(seq "$ROUNDS"); do
	for test in $TESTS; do
		for row in $ROWS; do
			[ "$test" = redis ] && [ "$row" = f ] && continue # the acceptance's rows
			echo "round $r: $test ($row)" >&2
			measure "$row" "$test" "$r"
		done
	done
done

printf '%-4s %-6s %10s %7s %7s %8s %8s %8s %9s %9s\n' row test 'req/s' 'vs(a)' 'vs(k)' \
	'srv_smc%' 'cli_smc%' errors 'srv_conns' 'cli_conns'
for test in $TESTS; do
	for t in $([ "$test" = redis ] && echo "set get" || echo "$test"); do
		ra=$(med "a.$t" rps)
		rk=$(med "k.$t" rps)
		for row in $ROWS; do
			[ -e "$OUT/$row.$t.1" ] || continue
			k=$row.$t
			st=$(sed -n 's/.* s_tcp=\([^ ]*\).*/\1/p' "$OUT/$k.1")
			ct=$(sed -n 's/.* c_tcp=\([^ ]*\).*/\1/p' "$OUT/$k.1")
			ss=$(sum "$k" s_smc) cs=$(sum "$k" c_smc)
			[ "$st" = - ] || st=$(sum "$k" s_tcp)
			[ "$ct" = - ] || ct=$(sum "$k" c_tcp)
			printf '%-4s %-6s %10s %7s %7s %8s %8s %8s %9s %9s\n' "$row" "$t" \
				"$(med "$k" rps)" "$(ratio "$(med "$k" rps)" "$ra")" \
				"$(ratio "$(med "$k" rps)" "$rk")" "$(share "$ss" "$st")" \
				"$(share "$cs" "$ct")" "$(sum "$k" errors)" \
				"$([ "$st" = - ] && echo - || echo $((ss + st)))" \
				"$([ "$ct" = - ] && echo - || echo $((cs + ct)))"
			case $row in
			k | u | U) [ "$ss" -gt 0 ] || {
				echo "bench-preload-rxe: row $row $t ran no connection over SMC-R" >&2
				fail=1
			} ;;
			esac
		done
	done
done
echo "(req/s: medians of $ROUNDS rounds; srv_smc%, cli_smc%: the SMC-R share of the" \
	"server's accepted and of the clients' connections over all rounds, - for a plain end;" \
	"conns: their number over all rounds)"
exit $fail
