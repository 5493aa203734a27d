#!/usr/bin/env bash
# Unmodified Debian binaries under usmc_run over loopback, without an RDMA
# device (docs/preload.md): every connection falls back to TCP
# (NOSMCRDEV) and the programs must not notice, while the -vv log shows
# that libusmc had each connection. The clients may propose to loopback
# (USMC_RUN_SMC_PEERS); without the list a client proposes nothing
# (DISABLED), or only as the SYN-ACK says in kernel-compatible mode,
# usmc_run's default (PEERNOSMC from a plain server).
#   python3 -m http.server + curl: a 4 MiB file, SHA-256 checked (curl also
#     through the gate of a non-blocking connect with a device)
#   python3 http.server + curl both in kernel-compatible mode: the server's
#     adopted listener answers curl's SMC SYN with the option; and nginx,
#     whose workers adopt the socket after dropping root
#   wrk (epoll, non-blocking connects) against examples/httpd: 0 errors
#   nc (netcat-openbsd, poll) on both ends
#   a pre-fork python server (the master listens, three workers accept)
#   a program with a UNIX socket, UDP and TCP to a non-usmc peer at once
#   socat on both ends, nginx (pre-fork, epoll, sendfile: 64 MiB SHA-256,
#     wrk keep-alive and close), redis-benchmark (pipelined and not) and
#     iperf3, where installed
#   preload_conn_check on both ends: EPOLLRDHUP/POLLRDHUP/POLLHUP with EOF
#     and children of fork() that inherit a connection, as the kernel's TCP
#     gives them (the same checks run over SMC-R in test_preload_rxe)
# usage: test_preload_tools.sh USMC_RUN HTTPD CONN_CHECK
set -euo pipefail
usmc_run=$(readlink -f "$1") httpd=$(readlink -f "$2") conn_check=$(readlink -f "$3")
export USMC_KERNEL_COMPAT=0 USMC_RUN_SMC_PEERS=127.0.0.1
dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*"
	for f in "$dir"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }; done
	exit 1
}
log=$dir/usmc.log
# the port a server printed (pattern's first group), waiting for it
wait_port() {
	local file=$1 re=$2 port
	for _ in $(seq 200); do
		port=$(sed -n "s/$re/\1/p" "$file" 2>/dev/null | head -n1)
		[ -n "$port" ] && { echo "$port"; return 0; }
		sleep 0.05
	done
	fail "no port in $file" >&2
}
# until URL $1 answers, or anything but "refused" (curl's 7) within 5 s: a
# server that listens and never answers fails the next step, not hangs here
wait_http() {
	local rc
	for _ in $(seq 100); do
		rc=0
		curl -s -o /dev/null --max-time 5 "$1" || rc=$?
		[ "$rc" = 7 ] || return 0
		sleep 0.05
	done
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- python3 -m http.server and curl
mkdir "$dir/www"
head -c $((4 << 20)) /dev/urandom >"$dir/www/big"
(cd "$dir/www" && exec "$usmc_run" -vv -o "$log" python3 -u -m http.server 0 --bind 127.0.0.1) \
	>"$dir/http.log" 2>&1 &
pids+=($!)
port=$(wait_port "$dir/http.log" '.*port \([0-9]*\).*')
want=$(sha256sum <"$dir/www/big" | cut -d' ' -f1)
for gate in 0 1; do
	got=$("$usmc_run" -vv -o "$log" USMC_PRELOAD_TEST_GATE=$gate \
		curl -sS --max-time 20 "http://127.0.0.1:$port/big" | sha256sum | cut -d' ' -f1)
	[ "$got" = "$want" ] || fail "curl (gate $gate): SHA-256 $got, want $want"
done
grep -q "curl: fd [0-9]* connected 127.0.0.1:[0-9]* -> 127.0.0.1:$port: TCP, fallback NOSMCRDEV" "$log" ||
	fail "no curl connection in the log"
grep -q "python3: fd [0-9]* accepted 127.0.0.1:$port <- .*: TCP, fallback NOSMCRDEV" "$log" ||
	fail "no python3 connection in the log"
grep -q "curl: accepted 0 SMC-R, 0 TCP; connected 0 SMC-R, 1 TCP; 0 connects failed" "$log" ||
	fail "no curl summary at exit"
echo "ok: python3 http.server + curl, 4 MiB twice, SHA-256 matches"
# without USMC_RUN_SMC_PEERS: no proposal (DISABLED); in kernel-compatible
# mode, usmc_run's default, only if the SYN-ACK says so (PEERNOSMC here),
# or none where the mode cannot load (DISABLED)
got=$(env -u USMC_RUN_SMC_PEERS "$usmc_run" -vv -o "$dir/nopeers.log" \
	curl -sS --max-time 20 "http://127.0.0.1:$port/big" | sha256sum | cut -d' ' -f1)
[ "$got" = "$want" ] || fail "curl without USMC_RUN_SMC_PEERS: SHA-256 $got, want $want"
grep -q "curl: fd [0-9]* connected .* -> 127.0.0.1:$port: TCP, fallback DISABLED" \
	"$dir/nopeers.log" || fail "curl without USMC_RUN_SMC_PEERS: $(cat "$dir/nopeers.log")"
got=$(env -u USMC_RUN_SMC_PEERS -u USMC_KERNEL_COMPAT "$usmc_run" -vv -o "$dir/kc.log" \
	curl -sS --max-time 20 "http://127.0.0.1:$port/big" | sha256sum | cut -d' ' -f1)
[ "$got" = "$want" ] || fail "curl, kernel-compatible mode: SHA-256 $got, want $want"
kc=$(sed -n "s/.*curl: fd [0-9]* connected .* -> 127.0.0.1:$port: TCP, fallback \([A-Z]*\).*/\1/p" \
	"$dir/kc.log")
[ "$kc" = PEERNOSMC ] || [ "$kc" = DISABLED ] ||
	fail "curl, usmc_run's default (kernel-compatible mode auto): $(cat "$dir/kc.log")"
echo "ok: curl without USMC_RUN_SMC_PEERS proposes nothing (DISABLED), in kernel-compatible" \
	"mode only as the SYN-ACK says ($kc)"

# --- kernel-compatible mode on both ends (usmc_run's default): the server's
# socket listens before the preload adopts it (at its first accept), and
# its SYN-ACKs carry the SMC option from then on (Linux 6.12 or later), so
# curl declines for want of a device instead of PEERNOSMC; where the mode
# cannot load, curl proposes nothing (DISABLED)
(cd "$dir/www" && exec env -u USMC_RUN_SMC_PEERS -u USMC_KERNEL_COMPAT "$usmc_run" -vv \
	-o "$dir/kcs.log" python3 -u -m http.server 0 --bind 127.0.0.1) >"$dir/kchttp.log" 2>&1 &
pids+=($!)
kport=$(wait_port "$dir/kchttp.log" '.*port \([0-9]*\).*')
got=$(env -u USMC_RUN_SMC_PEERS -u USMC_KERNEL_COMPAT "$usmc_run" -vv -o "$dir/kcs.log" \
	curl -sS --max-time 20 "http://127.0.0.1:$kport/big" | sha256sum | cut -d' ' -f1)
[ "$got" = "$want" ] || fail "curl to a kernel-compatible server: SHA-256 $got, want $want"
kc=$(sed -n "s/.*curl: fd [0-9]* connected .* -> 127.0.0.1:$kport: TCP, fallback \([A-Z]*\).*/\1/p" \
	"$dir/kcs.log")
kmaj=$(uname -r | cut -d. -f1) kmin=$(uname -r | cut -d. -f2)
if [ "$kc" = NOSMCRDEV ]; then
	grep -q "python3: fd [0-9]* accepted 127.0.0.1:$kport <- .*: TCP, fallback NOSMCRDEV from the peer" \
		"$dir/kcs.log" || fail "kernel-compatible server: $(cat "$dir/kcs.log")"
	echo "ok: kernel-compatible mode on both ends: the adopted listener's SYN-ACK had the option" \
		"(NOSMCRDEV, declined)"
elif [ "$kc" = DISABLED ] || { [ "$kc" = PEERNOSMC ] && [ $((kmaj * 100 + kmin)) -lt 612 ]; }; then
	echo "skip: kernel-compatible mode on both ends ($kc: no BPF here, or Linux before 6.12)"
else
	fail "kernel-compatible mode on both ends: curl $kc: $(cat "$dir/kcs.log")"
fi

# --- wrk (epoll, non-blocking connect) against examples/httpd, keep-alive and close
"$httpd" -a 127.0.0.1 -p 0 >"$dir/httpd.log" 2>&1 &
pids+=($!)
hport=$(wait_port "$dir/httpd.log" '.*listening on port \([0-9]*\).*')
for hdr in "Connection: keep-alive" "Connection: close"; do
	out=$("$usmc_run" -v -o "$log" wrk -t1 -c8 -d1s -H "$hdr" "http://127.0.0.1:$hport/" 2>&1)
	grep -q "Requests/sec" <<<"$out" || fail "wrk ($hdr): $out"
	! grep -qE "Socket errors|Non-2xx" <<<"$out" || fail "wrk ($hdr) errors: $out"
done
grep -q "wrk: accepted 0 SMC-R, 0 TCP; connected 0 SMC-R, [1-9][0-9]* TCP; 0 connects failed" "$log" ||
	fail "no wrk summary"
echo "ok: wrk keep-alive and Connection: close, 0 errors"

# --- nc on both ends (poll on stdin and the socket)
nport=$(free_port)
"$usmc_run" -vv -o "$log" nc -l 127.0.0.1 "$nport" >"$dir/nc.out" 2>"$dir/nc.log" &
ncpid=$!
pids+=($ncpid)
for _ in $(seq 100); do
	ss -ltn "sport = :$nport" 2>/dev/null | grep -q LISTEN && break
	sleep 0.05
done
head -c 300000 /dev/urandom >"$dir/nc.in"
"$usmc_run" -vv -o "$log" nc -N 127.0.0.1 "$nport" <"$dir/nc.in" || fail "nc client"
wait "$ncpid" || true
cmp -s "$dir/nc.in" "$dir/nc.out" || fail "nc: the bytes differ"
grep -q "nc: fd [0-9]* accepted 127.0.0.1:$nport" "$log" || fail "no nc server connection in the log"
echo "ok: nc to nc, 300000 bytes"

# --- a pre-fork server: the master listens, its workers accept
cat >"$dir/prefork.py" <<'PY'
import os, signal, socket, sys
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(64)
print("port", l.getsockname()[1], "master", os.getpid(), flush=True)
kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        while True:
            c, _ = l.accept()
            c.recv(1)
            c.sendall(str(os.getpid()).encode())
            c.close()
    kids.append(pid)
signal.sigwait([signal.SIGTERM])
for k in kids:
    os.kill(k, signal.SIGKILL)
PY
"$usmc_run" -vv -o "$log" python3 -u "$dir/prefork.py" >"$dir/prefork.log" 2>&1 &
pids+=($!)
pport=$(wait_port "$dir/prefork.log" 'port \([0-9]*\) .*')
master=$(sed -n 's/.* master \([0-9]*\)/\1/p' "$dir/prefork.log")
workers=$(for _ in $(seq 20); do
	"$usmc_run" python3 -c '
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(b"x"); print(c.recv(16).decode())' "$pport"
done | sort -u)
[ -n "$workers" ] || fail "pre-fork: no answer"
for w in $workers; do
	[ "$w" != "$master" ] || fail "pre-fork: the master answered"
	grep -q "usmc_run\[$w\] python3: fd [0-9]* accepted 127.0.0.1:$pport" "$log" ||
		fail "pre-fork: worker $w accepted without libusmc"
done
! grep -q "usmc_run\[$master\] python3: fd [0-9]* accepted" "$log" || fail "pre-fork: the master accepted"
echo "ok: pre-fork python server, 20 requests served by workers $(echo $workers)"

# --- a UNIX socket, UDP and TCP to a plain (non-usmc) peer in one program
python3 -c '
import socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(4)
print("port", l.getsockname()[1], flush=True)
while True:
    c, _ = l.accept(); c.sendall(c.recv(64).upper()); c.close()' >"$dir/plain.log" 2>&1 &
pids+=($!)
plport=$(wait_port "$dir/plain.log" 'port \([0-9]*\)')
out=$("$usmc_run" -vv -o "$log" python3 -c '
import socket, sys
a, b = socket.socketpair(socket.AF_UNIX); a.sendall(b"unix"); u1 = b.recv(8)
d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); d.bind(("127.0.0.1", 0))
e = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); e.sendto(b"udp", d.getsockname())
u2, _ = d.recvfrom(8)
t = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); t.sendall(b"tcp")
u3 = t.recv(8)
print(u1.decode(), u2.decode(), u3.decode())' "$plport")
[ "$out" = "unix udp TCP" ] || fail "mixed program: $out"
grep -q "python3: fd [0-9]* connected .* -> 127.0.0.1:$plport: TCP, fallback NOSMCRDEV" "$log" ||
	fail "mixed program: its TCP connection is not in the log"
# with USMC_RUN_SMC_PEERS not naming it, the client does not even try
out=$("$usmc_run" -vv -o "$log" USMC_RUN_SMC_PEERS=10.9.9.0/24,[fd00::1]:80 python3 -c '
import socket, sys
t = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); t.sendall(b"peers")
print(t.recv(8).decode())' "$plport")
[ "$out" = "PEERS" ] || fail "USMC_RUN_SMC_PEERS: $out"
grep -q "python3: fd [0-9]* connected .* -> 127.0.0.1:$plport: TCP, fallback DISABLED" "$log" ||
	fail "USMC_RUN_SMC_PEERS: the connection did not fall back with DISABLED"
echo "ok: UNIX socket, UDP and TCP to a plain peer in one program; USMC_RUN_SMC_PEERS"

# --- socat on both ends, where installed
if command -v socat >/dev/null; then
	sport=$(free_port)
	"$usmc_run" -vv -o "$log" socat -u "TCP-LISTEN:$sport,bind=127.0.0.1,reuseaddr" \
		"OPEN:$dir/socat.out,creat,trunc" 2>"$dir/socat.log" &
	scpid=$!
	pids+=($scpid)
	for _ in $(seq 100); do
		ss -ltn "sport = :$sport" 2>/dev/null | grep -q LISTEN && break
		sleep 0.05
	done
	"$usmc_run" -vv -o "$log" socat -u "OPEN:$dir/nc.in" "TCP:127.0.0.1:$sport" || fail "socat client"
	wait "$scpid" || true
	cmp -s "$dir/nc.in" "$dir/socat.out" || fail "socat: the bytes differ"
	echo "ok: socat to socat"
else
	echo "skip: socat not installed"
fi
# --- nginx (pre-fork master and workers, epoll, sendfile), where installed
if command -v nginx >/dev/null; then
	mkdir -p "$dir/ngx/www" "$dir/ngx/tmp"
	chmod a+rx "$dir" "$dir/ngx" "$dir/ngx/www" # the workers run as nginx's user
	head -c $((64 << 20)) /dev/urandom >"$dir/ngx/www/big"
	echo small >"$dir/ngx/www/index.html"
	chmod a+r "$dir/ngx/www/big" "$dir/ngx/www/index.html"
	gport=$(free_port)
	cat >"$dir/ngx/nginx.conf" <<NGX
daemon off;
master_process on;
worker_processes 2;
error_log $dir/ngx/error.log warn;
pid $dir/ngx/nginx.pid;
events { worker_connections 256; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 1000000;
	client_body_temp_path $dir/ngx/tmp;
	proxy_temp_path $dir/ngx/tmp;
	fastcgi_temp_path $dir/ngx/tmp;
	uwsgi_temp_path $dir/ngx/tmp;
	scgi_temp_path $dir/ngx/tmp;
	server { listen 127.0.0.1:$gport; root $dir/ngx/www; }
}
NGX
	"$usmc_run" -vv -o "$log" nginx -p "$dir/ngx" -c "$dir/ngx/nginx.conf" >"$dir/nginx.log" 2>&1 &
	ngxpid=$!
	pids+=($ngxpid)
	wait_http "http://127.0.0.1:$gport/index.html"
	want=$(sha256sum <"$dir/ngx/www/big" | cut -d' ' -f1)
	got=$("$usmc_run" -vv -o "$log" curl -fsS --max-time 60 "http://127.0.0.1:$gport/big" |
		sha256sum | cut -d' ' -f1)
	[ "$got" = "$want" ] || fail "nginx: SHA-256 of the 64 MiB file $got, want $want"
	for hdr in "Connection: keep-alive" "Connection: close"; do
		out=$("$usmc_run" wrk -t1 -c8 -d1s -H "$hdr" "http://127.0.0.1:$gport/index.html" 2>&1)
		grep -q "Requests/sec" <<<"$out" || fail "wrk nginx ($hdr): $out"
		! grep -qE "Socket errors|Non-2xx" <<<"$out" || fail "wrk nginx ($hdr) errors: $out"
	done
	kill -QUIT "$ngxpid"
	wait "$ngxpid" || true
	grep -q "nginx: worker process.*: fd [0-9]* accepted 127.0.0.1:$gport" "$log" ||
		fail "nginx: no worker connection in the log"
	grep -q "nginx: worker process.*: accepted 0 SMC-R, [1-9][0-9]* TCP" "$log" ||
		fail "nginx: no worker summary at exit"
	echo "ok: nginx (2 workers, sendfile): 64 MiB SHA-256, wrk keep-alive and close without errors"
	# kernel-compatible mode: the master (root) loads the BPF program at
	# its listen(), the workers (nobody by then) adopt the socket with it
	kport=$(free_port)
	sed "s/listen 127.0.0.1:$gport;/listen 127.0.0.1:$kport;/; s|$dir/ngx/nginx.pid|$dir/ngx/kc.pid|" \
		"$dir/ngx/nginx.conf" >"$dir/ngx/kc.conf"
	env -u USMC_KERNEL_COMPAT -u USMC_RUN_SMC_PEERS "$usmc_run" -vv -o "$dir/kcngx.log" \
		nginx -p "$dir/ngx" -c "$dir/ngx/kc.conf" >"$dir/kcnginx.log" 2>&1 &
	ngxpid=$!
	pids+=($ngxpid)
	wait_http "http://127.0.0.1:$kport/index.html"
	env -u USMC_KERNEL_COMPAT -u USMC_RUN_SMC_PEERS "$usmc_run" -vv -o "$dir/kcngx.log" \
		curl -fsS -o /dev/null --max-time 20 "http://127.0.0.1:$kport/index.html" ||
		fail "curl to nginx in kernel-compatible mode"
	kill -QUIT "$ngxpid"
	wait "$ngxpid" || true
	kc=$(sed -n "s/.*curl: fd [0-9]* connected .* -> 127.0.0.1:$kport: TCP, fallback \([A-Z]*\).*/\1/p" \
		"$dir/kcngx.log")
	if [ "$kc" = NOSMCRDEV ]; then
		grep -q "nginx: worker process: fd [0-9]* accepted 127.0.0.1:$kport <- .*NOSMCRDEV from the peer" \
			"$dir/kcngx.log" || fail "nginx, kernel-compatible mode: $(cat "$dir/kcngx.log")"
		echo "ok: nginx in kernel-compatible mode: its workers (not root) answer curl's SMC SYN" \
			"with the option (NOSMCRDEV, declined)"
	elif [ "$kc" = DISABLED ] || { [ "$kc" = PEERNOSMC ] && [ $((kmaj * 100 + kmin)) -lt 612 ]; }; then
		echo "skip: nginx in kernel-compatible mode ($kc: no BPF here, or Linux before 6.12)"
	else
		fail "nginx in kernel-compatible mode: curl $kc: $(cat "$dir/kcngx.log")"
	fi
else
	echo "skip: nginx not installed"
fi

# --- redis-server and redis-benchmark, pipelined and not, where installed
if command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; then
	rport=$(free_port)
	"$usmc_run" -vv -o "$log" redis-server --port "$rport" --bind 127.0.0.1 --save '' \
		--appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
	rpid=$!
	pids+=($rpid)
	for _ in $(seq 100); do
		grep -q "Ready to accept" "$dir/redis.log" && break
		sleep 0.05
	done
	for p in 1 16; do
		out=$("$usmc_run" redis-benchmark -p "$rport" -n 5000 -c 4 -P "$p" -t set,get -q 2>&1)
		[ "$(grep -c 'requests per second' <<<"$out")" = 2 ] || fail "redis-benchmark -P $p: $out"
		! grep -qi "error" <<<"$out" || fail "redis-benchmark -P $p: $out"
	done
	kill "$rpid"
	grep -q "redis-server: fd [0-9]* accepted 127.0.0.1:$rport" "$log" ||
		fail "redis: no connection in the log"
	echo "ok: redis-server + redis-benchmark, pipelined and not"
else
	echo "skip: redis not installed"
fi

# --- iperf3 (select, a control and a data connection), where installed
if command -v iperf3 >/dev/null; then
	iport=$(free_port)
	"$usmc_run" -vv -o "$log" iperf3 -s -1 -B 127.0.0.1 -p "$iport" >"$dir/iperf.log" 2>&1 &
	ipid=$!
	pids+=($ipid)
	for _ in $(seq 100); do
		ss -ltn "sport = :$iport" 2>/dev/null | grep -q LISTEN && break
		sleep 0.05
	done
	out=$("$usmc_run" -vv -o "$log" iperf3 -c 127.0.0.1 -p "$iport" -t 1 2>&1) ||
		fail "iperf3: $out"
	grep -q "receiver" <<<"$out" || fail "iperf3: $out"
	wait "$ipid" || fail "iperf3 server: $(cat "$dir/iperf.log")"
	echo "ok: iperf3"
else
	echo "skip: iperf3 not installed"
fi
# --- preload_conn_check: EPOLLRDHUP, fork and epoll round trips, as plain
# TCP gives them
for t in rdhup fork evloop; do
	cport=$(free_port)
	sargs=() cargs=(127.0.0.1)
	[ "$t" = fork ] && sargs=(tcp) cargs=(tcp 127.0.0.1)
	[ "$t" = evloop ] && sargs=(200) cargs=(127.0.0.1 200)
	"$usmc_run" -vv -o "$log" "$conn_check" "$t-server" 127.0.0.1 "$cport" "${sargs[@]}" \
		>"$dir/check-$t.log" 2>&1 &
	cpid=$!
	pids+=($cpid)
	out=$("$usmc_run" -vv -o "$log" "$conn_check" "$t-client" 127.0.0.1 "$cport" \
		"${cargs[@]}" 2>&1) || fail "preload_conn_check $t-client: $out"
	wait "$cpid" || fail "preload_conn_check $t-server: $(cat "$dir/check-$t.log")"
	grep -q "preload_conn_check: fd [0-9]* accepted 127.0.0.1:$cport <- .*: TCP" "$log" ||
		fail "preload_conn_check $t: its connection is not in the log"
	echo "$out"
	grep '^ok' "$dir/check-$t.log"
done
echo "test_preload_tools: all passed"
