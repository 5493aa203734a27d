#!/usr/bin/env bash
# rxe test (two hosts): unmodified Debian binaries under usmc_run
# on both ends, SMC-R checked on both ends by the preload's per-connection
# lines (usmc_conn_info() of each connection, -vv) and its exit counters.
#   nginx on B (master + 2 workers, epoll, sendfile on): curl from A
#     (--interface: a bind before connect) fetches 64 MiB, SHA-256 checked;
#     wrk with keep-alive and with Connection: close, 0 errors; req/s next
#     to plain nginx over TCP and to examples/httpd (libusmc) over SMC-R
#   redis-server on B, redis-benchmark from A, pipelined and not: 0 errors
#   a program with a UNIX socket, UDP, an SMC-R connection to python3's
#     http.server under usmc_run and a TCP connection to a plain server at
#     once (USMC_RUN_SMC_PEERS names B)
#   iperf3 -s on B, iperf3 -c from A (select, non-blocking sockets, a
#     control and a data connection, TCP_INFO/TCP_CONGESTION), both
#     directions (-R): 0 errors, each connection SMC-R on both ends;
#     Mbit/s next to plain iperf3 over TCP
#   preload_conn_check (a plain-socket C program) on B and A: the peer's
#     shutdown(SHUT_WR) and close as EPOLLRDHUP/POLLRDHUP/POLLHUP with EOF
#     (rdhup), children of fork() that inherit the SMC-R connection (their
#     calls fail with ENOTCONN, the parent's stream stays intact) (fork),
#     2,000 round trips through epoll_wait() and blocking reads with the
#     link group threads asleep: the program's waits run the completions,
#     also with the server's registration deleted and added again and its
#     epoll set replaced by a new one of the same number (closed and made
#     again, or dup2()ed over) (evloop)
#   curl under usmc_run on A, with its RDMA device, against a plain
#     python3 -m http.server on B: no CLC byte reaches the server, the body's
#     SHA-256 matches; without kernel-compatible mode and USMC_RUN_SMC_PEERS
#     the client proposes nothing (DISABLED), in kernel-compatible mode
#     (usmc_run's default) the SYN-ACK says the server does not speak SMC
#     (PEERNOSMC) (curl)
#   a kernel AF_SMC client (build/tools/libksmc-preload.so) that connects
#     to a python3 server under usmc_run in kernel-compatible mode between
#     the server's listen() and its first accept(), as wrk does to a
#     pre-fork nginx whose workers have not adopted the socket yet: the
#     socket, marked at listen(), answered with the SMC option, and the
#     queued connection runs SMC-R at the server, 4 MiB intact (early)
# The other parts' clients propose to B (USMC_RUN_SMC_PEERS) without
# kernel-compatible mode.
# Skips (exit 0 with a note) what is not installed: nginx, redis, wrk,
# iperf3, the kernel's AF_SMC (vm-run.sh --smc).
#
# Usage: test_preload_rxe.sh <usmc_run> <httpd> <preload_conn_check> [PART...]
#   PART: nginx, redis, mixed, iperf3, rdhup, evloop, fork, curl, early
#   (default: all). early's tools: USMC_TEST_KSMC (libksmc-preload.so) and
#   USMC_TEST_KCTL (smc_kctl), by default from the build tree of usmc_run.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../../tools/common/rxe-env.sh"
USMC_RUN=$(readlink -f "${1:?usmc_run}")
HTTPD=$(readlink -f "${2:?httpd}")
CHECK=$(readlink -f "${3:?preload_conn_check}")
shift 3
parts=" ${*:-nginx redis mixed iperf3 rdhup evloop fork curl early} "
want() { [[ $parts == *" $1 "* ]]; }
A=$USMC_TEST_HOST_A B=$USMC_TEST_HOST_B
[ "$A" != "$B" ] || rxe_fail "needs two hosts (tests/rxe/vm-run.sh --setup two)"
export USMC_KERNEL_COMPAT=0 USMC_RUN_SMC_PEERS=$B
dir=$(mktemp -d)
chmod a+rx "$dir" # nginx's workers run as its user
log=$dir/usmc.log
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
# Diagnostics go to stderr: fail may run inside $(...) (wrk_rps).
fail() {
	{
		echo "--- usmc log (tail)"
		tail -n 30 "$log" 2>/dev/null || true
		echo "--- usmc log: failures and fallbacks"
		grep -E 'failed: |fallback|error' "$log" 2>/dev/null | tail -n 20 || true
		for f in "$dir"/*.log "$dir"/ngx*/error.log; do
			[ -f "$f" ] && [ "$f" != "$log" ] && { echo "--- $f"; tail -n 15 "$f"; }
		done
	} >&2
	rxe_fail "$*"
}
wait_http() {
	for _ in $(seq 300); do
		curl -s -o /dev/null "$1" && return 0
		sleep 0.1
	done
	fail "no answer from $1"
}
# nginx_conf DIR PORT: a config serving DIR/www on B:PORT
nginx_conf() {
	mkdir -p "$1/tmp"
	cat >"$1/nginx.conf" <<NGX
daemon off;
master_process on;
worker_processes 2;
error_log $1/error.log warn;
pid $1/nginx.pid;
events { worker_connections 512; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 1000000;
	client_body_temp_path $1/tmp;
	proxy_temp_path $1/tmp;
	fastcgi_temp_path $1/tmp;
	uwsgi_temp_path $1/tmp;
	scgi_temp_path $1/tmp;
	server { listen $B:$2; root $dir/www; }
}
NGX
}
# wrk_rps OUT: the Requests/sec of a wrk output; fails on errors
wrk_rps() {
	grep -q "Requests/sec" <<<"$1" || fail "wrk: $1"
	! grep -qE "Socket errors|Non-2xx" <<<"$1" || fail "wrk errors: $1"
	sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' <<<"$1"
}

mkdir -p "$dir/www"
chmod a+rx "$dir/www"
head -c $((64 << 20)) /dev/urandom >"$dir/www/big"
printf 'hello from nginx\n' >"$dir/www/index.html"
chmod a+r "$dir/www/big" "$dir/www/index.html"

if ! want nginx; then
	:
elif command -v nginx >/dev/null; then
	P=18731 PP=18732
	nginx_conf "$dir/ngx" "$P"
	"$USMC_RUN" -vv -o "$log" nginx -p "$dir/ngx" -c "$dir/ngx/nginx.conf" \
		>"$dir/nginx.log" 2>&1 &
	ngx=$!
	pids+=("$ngx")
	wait_http "http://$B:$P/index.html" # plain curl: a TCP client, PEERNOSMC at nginx
	want=$(sha256sum <"$dir/www/big" | cut -d' ' -f1)
	t0=$(date +%s.%N)
	got=$("$USMC_RUN" -vv -o "$log" curl -fsS --max-time 300 --interface "$A" \
		"http://$B:$P/big" | sha256sum | cut -d' ' -f1)
	t1=$(date +%s.%N)
	[ "$got" = "$want" ] || fail "nginx: SHA-256 $got, want $want"
	grep -q "curl: fd [0-9]* connected $A:[0-9]* -> $B:$P: SMC-R" "$log" ||
		fail "curl's connection did not run SMC-R"
	grep -q "nginx: worker process.*: fd [0-9]* accepted $B:$P <- $A:[0-9]*: SMC-R" "$log" ||
		fail "no nginx worker accepted over SMC-R"
	echo "ok: nginx -> curl, 64 MiB over SMC-R, SHA-256 matches" \
		"($(echo "$t0 $t1" | awk '{printf "%.1f s", $2 - $1}'))"
	if command -v wrk >/dev/null; then
		ka=$(wrk_rps "$("$USMC_RUN" -v -o "$log" wrk -t1 -c4 -d5s "http://$B:$P/index.html" 2>&1)")
		cl=$(wrk_rps "$("$USMC_RUN" -v -o "$log" wrk -t1 -c4 -d5s -H 'Connection: close' \
			"http://$B:$P/index.html" 2>&1)")
		grep -q "wrk: accepted 0 SMC-R, 0 TCP; connected [1-9][0-9]* SMC-R, 0 TCP; 0 connects failed" \
			"$log" || fail "wrk: not every connection ran SMC-R"
		# plain nginx over TCP, and libusmc's own examples/httpd over SMC-R
		nginx_conf "$dir/ngx-plain" "$PP"
		nginx -p "$dir/ngx-plain" -c "$dir/ngx-plain/nginx.conf" >"$dir/nginx-plain.log" 2>&1 &
		pids+=($!)
		wait_http "http://$B:$PP/index.html"
		tka=$(wrk_rps "$(wrk -t1 -c4 -d5s "http://$B:$PP/index.html" 2>&1)")
		tcl=$(wrk_rps "$(wrk -t1 -c4 -d5s -H 'Connection: close' "http://$B:$PP/index.html" 2>&1)")
		USMC_LOG=info "$HTTPD" -a "$B" -p 18733 >"$dir/httpd.log" 2>&1 &
		pids+=($!)
		wait_http "http://$B:18733/"
		hka=$(wrk_rps "$("$USMC_RUN" -vv -o "$log" wrk -t1 -c4 -d5s "http://$B:18733/" 2>&1)")
		hcl=$(wrk_rps "$("$USMC_RUN" -vv -o "$log" wrk -t1 -c4 -d5s -H 'Connection: close' \
			"http://$B:18733/" 2>&1)")
		echo "ok: wrk, 0 errors; requests/s (wrk -t1 -c4 -d5s, soft-RoCE under qemu):"
		printf '  %-44s %12s %18s\n' server keep-alive "Connection: close"
		printf '  %-44s %12s %18s\n' "nginx under usmc_run, SMC-R" "$ka" "$cl"
		printf '  %-44s %12s %18s\n' "nginx plain, TCP" "$tka" "$tcl"
		printf '  %-44s %12s %18s\n' "examples/httpd (libusmc), SMC-R" "$hka" "$hcl"
	else
		echo "skip: wrk not installed"
	fi
else
	echo "skip: nginx not installed"
fi

if ! want redis; then
	:
elif command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; then
	R=18734
	"$USMC_RUN" -vv -o "$log" redis-server --port "$R" --bind "$B" --protected-mode no --save "" \
		--appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
	pids+=($!)
	for i in $(seq 300); do
		grep -q "Ready to accept" "$dir/redis.log" && break
		[ "$i" != 300 ] || fail "redis-server did not start"
		sleep 0.1
	done
	for p in 1 16; do
		out=$("$USMC_RUN" -v -o "$log" redis-benchmark -h "$B" -p "$R" -n 4000 -c 4 -P "$p" \
			-t set,get -q 2>&1) || fail "redis-benchmark -P $p: exit $?: $out"
		[ "$(grep -c 'requests per second' <<<"$out")" = 2 ] || fail "redis-benchmark -P $p: $out"
		! grep -qi "error" <<<"$out" || fail "redis-benchmark -P $p: $out"
		echo "ok: redis-benchmark -P $p over SMC-R:" \
			$(tr '\r' '\n' <<<"$out" | grep -oE '[A-Z]+: [0-9.]+ requests per second')
	done
	grep -q "redis-server: fd [0-9]* accepted $B:$R <- $A:[0-9]*: SMC-R" "$log" ||
		fail "redis-server accepted no SMC-R connection"
	grep -q "redis-benchmark: accepted 0 SMC-R, 0 TCP; connected [1-9][0-9]* SMC-R, 0 TCP" "$log" ||
		fail "redis-benchmark: not every connection ran SMC-R"
else
	echo "skip: redis not installed"
fi

# A UNIX socket, UDP, SMC-R to a server under usmc_run and TCP to a plain
# server, in one program
if want mixed; then
	(cd "$dir/www" && exec "$USMC_RUN" -vv -o "$log" python3 -u -m http.server 18735 \
		--bind "$B") >"$dir/pyhttp.log" 2>&1 &
	pids+=($!)
	wait_http "http://$B:18735/index.html"
	python3 -c '
import socket, sys
l = socket.socket(); l.bind((sys.argv[1], 0)); l.listen(4)
print("port", l.getsockname()[1], flush=True)
while True:
    c, _ = l.accept(); c.sendall(c.recv(64).upper()); c.close()' "$A" >"$dir/plain.log" 2>&1 &
	pids+=($!)
	pl=
	for _ in $(seq 100); do
		pl=$(sed -n 's/port \([0-9]*\)/\1/p' "$dir/plain.log")
		[ -n "$pl" ] && break
		sleep 0.1
	done
	[ -n "$pl" ] || fail "plain server did not start"
	out=$("$USMC_RUN" -vv -o "$log" USMC_RUN_SMC_PEERS="$B" python3 -c '
import socket, sys
a, b = socket.socketpair(socket.AF_UNIX); a.sendall(b"unix"); u1 = b.recv(8)
d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); d.bind(("127.0.0.1", 0))
e = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); e.sendto(b"udp", d.getsockname())
u2, _ = d.recvfrom(8)
t = socket.create_connection((sys.argv[1], int(sys.argv[2]))); t.sendall(b"tcp")
u3 = t.recv(8)
n = socket.create_connection((sys.argv[3], 18735))
n.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
u4 = b"http" if b"hello from nginx" in n.makefile("rb").read() else b"?"
print(u1.decode(), u2.decode(), u3.decode(), u4.decode())' "$A" "$pl" "$B" 2>&1) ||
		fail "mixed program: exit $?: $out"
	[ "$out" = "unix udp TCP http" ] || fail "mixed program: $out"
	grep -q "python3: fd [0-9]* connected .* -> $A:$pl: TCP, fallback DISABLED" "$log" ||
		fail "mixed program: the plain peer's connection did not fall back (DISABLED)"
	grep -q "python3: fd [0-9]* connected .* -> $B:18735: SMC-R" "$log" ||
		fail "mixed program: the connection to the usmc_run server did not run SMC-R"
	grep -q "python3: fd [0-9]* accepted $B:18735 <- $A:[0-9]*: SMC-R" "$log" ||
		fail "mixed program: the usmc_run server did not accept over SMC-R"
	echo "ok: UNIX socket, UDP, SMC-R and a TCP fallback (DISABLED) in one program: $out"
fi
# wait_listen PORT: until something listens on B:PORT
wait_listen() {
	for _ in $(seq 300); do
		ss -ltn "sport = :$1" 2>/dev/null | grep -q LISTEN && return 0
		sleep 0.1
	done
	fail "nothing listens on $B:$1"
}

# iperf_run LABEL USMC(0|1) [-R]: one iperf3 test of 3 s from A to B (or
# back with -R); the receiver's Mbit/s in $mbps. Under usmc_run, the
# control and the data connection must run SMC-R on both ends.
iperf_run() {
	local label=$1 usmc=$2 pre=() rlog=$dir/iperf-$1.log p=18736 spid out
	shift 2
	[ "$usmc" = 0 ] || pre=("$USMC_RUN" -vv -o "$rlog")
	"${pre[@]}" iperf3 -s -1 -B "$B" -p "$p" >"$dir/iperf3-s-$label.log" 2>&1 &
	spid=$!
	pids+=("$spid")
	wait_listen "$p"
	"${pre[@]}" iperf3 -c "$B" -B "$A" -p "$p" -t 3 -J "$@" >"$dir/iperf3-c-$label.json" 2>&1 ||
		fail "iperf3 $label: exit $?: $(tail -n 20 "$dir/iperf3-c-$label.json")"
	wait "$spid" || fail "iperf3 -s $label: exit $?: $(tail -n 20 "$dir/iperf3-s-$label.log")"
	out=$(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
if "error" in j:
    sys.exit("error: " + j["error"])
r, s = j["end"]["sum_received"], j["end"]["sum_sent"]
if r["bytes"] <= 0 or s["bytes"] <= 0:
    sys.exit("no bytes: %s" % j["end"])
print("%.1f" % (r["bits_per_second"] / 1e6))' "$dir/iperf3-c-$label.json" 2>&1) ||
		fail "iperf3 $label: $out"
	if [ "$usmc" = 1 ]; then
		cat "$rlog" >>"$log"
		[ "$(grep -c "iperf3: fd [0-9]* connected $A:[0-9]* -> $B:$p: SMC-R" "$rlog")" = 2 ] ||
			fail "iperf3 $label: the client's control and data connections did not both run SMC-R"
		[ "$(grep -c "iperf3: fd [0-9]* accepted $B:$p <- $A:[0-9]*: SMC-R" "$rlog")" = 2 ] ||
			fail "iperf3 $label: the server did not accept both connections over SMC-R"
		! grep -q ": TCP, fallback\|unsupported" "$rlog" || fail "iperf3 $label: $(cat "$rlog")"
	fi
	mbps=$out
}

if ! want iperf3; then
	:
elif command -v iperf3 >/dev/null; then
	iperf_run smcr 1
	s_up=$mbps
	iperf_run smcr-R 1 -R
	s_down=$mbps
	iperf_run tcp 0
	t_up=$mbps
	iperf_run tcp-R 0 -R
	t_down=$mbps
	echo "ok: iperf3 under usmc_run on both ends, 0 errors, control and data connections" \
		"SMC-R on both ends; Mbit/s at the receiver (iperf3 -t 3, soft-RoCE under qemu):"
	printf '  %-34s %10s %14s\n' "" "A -> B" "B -> A (-R)"
	printf '  %-34s %10s %14s\n' "iperf3 under usmc_run, SMC-R" "$s_up" "$s_down"
	printf '  %-34s %10s %14s\n' "iperf3 plain, TCP" "$t_up" "$t_down"
else
	echo "skip: iperf3 not installed"
fi

# check_pair NAME PORT SERVER-ARGS -- CLIENT-ARGS: preload_conn_check under
# usmc_run on B and A, over SMC-R on both ends
check_pair() {
	local name=$1 port=$2 sargs=() cargs=() spid out
	shift 2
	while [ "$1" != -- ]; do sargs+=("$1"); shift; done
	shift
	cargs=("$@")
	"$USMC_RUN" -vv -o "$log" "$CHECK" "${sargs[@]}" >"$dir/check-$name.log" 2>&1 &
	spid=$!
	pids+=("$spid")
	out=$("$USMC_RUN" -vv -o "$log" "$CHECK" "${cargs[@]}" 2>&1) ||
		fail "preload_conn_check ${cargs[0]}: $out"
	wait "$spid" || fail "preload_conn_check ${sargs[0]}: $(cat "$dir/check-$name.log")"
	grep -q "preload_conn_check: fd [0-9]* connected $A:[0-9]* -> $B:$port: SMC-R" "$log" ||
		fail "$name: the client's connection did not run SMC-R"
	grep -q "preload_conn_check: fd [0-9]* accepted $B:$port <- $A:[0-9]*: SMC-R" "$log" ||
		fail "$name: the server's connection did not run SMC-R"
	grep '^ok' "$dir/check-$name.log"
	echo "$out"
}

if want rdhup; then
	check_pair rdhup 18737 rdhup-server "$B" 18737 -- rdhup-client "$B" 18737 "$A"
fi
if want evloop; then
	check_pair evloop 18741 evloop-server "$B" 18741 2000 -- evloop-client "$B" 18741 "$A" 2000
fi
if want fork; then
	check_pair fork 18738 fork-server "$B" 18738 smcr -- fork-client "$B" 18738 smcr "$A"
	# each closing child's 6 calls, counted by its preload at exit
	[ "$(grep -c "preload_conn_check: data calls on SMC-R connections inherited across fork: 6$" \
		"$log")" = 2 ] || fail "fork: the children's refused calls are not counted"
	echo "ok: fork: the children's calls on the inherited SMC-R connections failed (ENOTCONN)," \
		"the parents' streams stayed intact"
fi

# curl_plain LABEL REASON [NAME=VALUE...]: usmc_run curl on A (its device)
# fetches the blob from the plain python3 http.server on B, with the
# environment changes given (env(1) words); the body must match, the
# connection fall back with REASON, and the server see no CLC byte
curl_plain() {
	local label=$1 reason=$2 clog=$dir/curl-$1.log got
	shift 2
	got=$(env "$@" "$USMC_RUN" -vv -o "$clog" curl -fsS --max-time 60 --interface "$A" \
		"http://$B:$PLAIN/big" | sha256sum | cut -d' ' -f1) ||
		fail "curl $label: exit $?: $(cat "$clog")"
	cat "$clog" >>"$log"
	[ "$got" = "$want" ] || fail "curl $label: SHA-256 $got, want $want"
	grep -q "curl: fd [0-9]* connected $A:[0-9]* -> $B:$PLAIN: TCP, fallback $reason" "$clog" ||
		fail "curl $label: not a TCP fallback $reason: $(cat "$clog")"
	! grep -q "Bad request\|code 400" "$dir/plain-http.log" ||
		fail "curl $label: the plain server read CLC bytes: $(tail -n 5 "$dir/plain-http.log")"
	echo "ok: usmc_run curl ($label) from a plain python3 http.server: SHA-256 matches," \
		"TCP $reason, no CLC byte at the server"
}

if want curl; then
	PLAIN=18739
	(cd "$dir/www" && exec python3 -u -m http.server "$PLAIN" --bind "$B") \
		>"$dir/plain-http.log" 2>&1 &
	pids+=($!)
	wait_http "http://$B:$PLAIN/index.html"
	want=$(sha256sum <"$dir/www/big" | cut -d' ' -f1)
	curl_plain "no kernel-compatible mode" DISABLED -u USMC_RUN_SMC_PEERS
	curl_plain "kernel-compatible mode" PEERNOSMC -u USMC_RUN_SMC_PEERS -u USMC_KERNEL_COMPAT
fi

# early: a kernel SMC client queued before the server's first accept().
# The server waits for $dir/early-go, which is made once its listening
# socket's accept queue holds the client (ss: Recv-Q of a LISTEN socket),
# so the client's SYN was answered before any usmc listener existed.
early_server='
import hashlib, os, socket, sys, time
s = socket.socket()
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(8)
print("listening", flush=True)
end = time.time() + 60
while not os.path.exists(sys.argv[3]) and time.time() < end:
    time.sleep(0.05)
c, _ = s.accept()
h, n = hashlib.sha256(), 0
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    h.update(b)
    n += len(b)
c.sendall(h.hexdigest().encode())
c.close()
print("received", n, h.hexdigest(), flush=True)'
early_client='
import hashlib, os, socket, sys
data = os.urandom(4 << 20)
c = socket.socket()
c.bind((sys.argv[3], 0))
c.connect((sys.argv[1], int(sys.argv[2])))
c.sendall(data)
c.shutdown(socket.SHUT_WR)
got = b""
while True:
    b = c.recv(256)
    if not b:
        break
    got += b
want = hashlib.sha256(data).hexdigest()
print("intact" if got.decode() == want else "sent %s, server read %s" % (want, got))'

if ! want early; then
	:
elif [ ! -e /sys/module/smc ]; then
	echo "skip: early: the kernel's smc module is not loaded (tests/rxe/vm-run.sh --smc)"
else
	KSMC=${USMC_TEST_KSMC:-$(dirname "$USMC_RUN")/libksmc-preload.so}
	KCTL=${USMC_TEST_KCTL:-$(dirname "$USMC_RUN")/../tests/smc_kctl}
	E=18740 elog=$dir/early-usmc.log
	# a kernel client proposes SMC-Rv2 over rxe only with a UEID, which the
	# server shares
	"$KCTL" ueid flush && "$KCTL" ueid add USMC-PRELOAD-EARLY
	env -u USMC_RUN_SMC_PEERS "$USMC_RUN" -vv -o "$elog" USMC_KERNEL_COMPAT=1 \
		USMC_UEID=USMC-PRELOAD-EARLY python3 -u -c "$early_server" "$B" "$E" \
		"$dir/early-go" >"$dir/early-server.log" 2>&1 &
	spid=$!
	pids+=("$spid")
	for i in $(seq 300); do
		grep -q listening "$dir/early-server.log" && break
		[ "$i" != 300 ] || fail "early: the server did not listen: $(cat "$dir/early-server.log")"
		sleep 0.1
	done
	LD_PRELOAD=$KSMC python3 -c "$early_client" "$B" "$E" "$A" >"$dir/early-client.log" 2>&1 &
	cpid=$!
	pids+=("$cpid")
	q=0
	for _ in $(seq 300); do
		q=$(ss -Hltn "sport = :$E" | awk '{print $2; exit}')
		[ "${q:-0}" -ge 1 ] && break
		sleep 0.1
	done
	[ "${q:-0}" -ge 1 ] || fail "early: the client's connection never waited in the accept queue"
	touch "$dir/early-go"
	wait "$cpid" || fail "early: client exit $?: $(cat "$dir/early-client.log")"
	wait "$spid" || fail "early: server exit $?: $(cat "$dir/early-server.log")"
	"$KCTL" ueid flush
	cat "$elog" >>"$log"
	[ "$(cat "$dir/early-client.log")" = intact ] ||
		fail "early: $(cat "$dir/early-client.log"); server: $(cat "$dir/early-server.log")"
	grep -q "python3: fd [0-9]* accepted $B:$E <- $A:[0-9]*: SMC-R" "$elog" ||
		fail "early: the connection queued before the first accept() did not run SMC-R:" \
			"$(grep "accepted" "$elog")"
	echo "ok: a kernel AF_SMC client queued between listen() and the first accept() of" \
		"a server under usmc_run (kernel-compatible mode): SMC-R, 4 MiB intact"
fi

echo "--- the preload's counters at exit"
grep -E ": accepted [0-9]+ SMC-R|: fallback " "$log" | sed 's/^/  /'
echo "test_preload_rxe: all passed"
