#!/usr/bin/env bash
# Real plain-TCP tools against the examples over the TCP path:
# curl (keep-alive and Connection: close), nc (raw requests: malformed ones
# get 400, HEAD, a request body, bare LF, an oversize head gets 431),
# wrk (0 socket errors), and
# echo_client against echo_server.
# usage: test_tools_tcp.sh HTTPD ECHO_SERVER ECHO_CLIENT
set -euo pipefail
httpd=$1 echo_server=$2 echo_client=$3
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# Start a server on port 0 and read the port it prints once it listens.
# usage: start_server LOG cmd...   (sets $port and appends to $pids)
start_server() {
	local log=$1
	shift
	# emptied here, not by the child's redirection: a log of an earlier run
	# in this build tree must not be read before the child opens it
	: >"$log"
	"$@" >>"$log" &
	pids+=($!)
	for _ in $(seq 200); do
		port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$log")
		[ -n "$port" ] && return 0
		sleep 0.05
	done
	echo "server never listened: $*"
	return 1
}

start_server httpd.log "$httpd" -a 127.0.0.1 -p 0

# two requests on one connection, then one that asks to close
out=$(curl -sS --http1.1 "http://127.0.0.1:$port/a" "http://127.0.0.1:$port/b" -w '%{num_connects}\n')
[ "$(printf '%s\n' "$out" | grep -c '^abcdefghijkl$')" -eq 2 ] || { echo "curl keep-alive: $out"; exit 1; }
[ "$(printf '%s\n' "$out" | tail -n1)" = 0 ] || { echo "curl did not reuse the connection: $out"; exit 1; }
hdrs=$(curl -sS -D - -o /dev/null -H 'Connection: close' "http://127.0.0.1:$port/")
grep -qi '^Connection: close' <<<"$hdrs" || { echo "no Connection: close: $hdrs"; exit 1; }

# nc: a raw HTTP/1.0 request; the server must close after answering
resp=$(printf 'GET / HTTP/1.0\r\n\r\n' | timeout 5 nc -N 127.0.0.1 "$port")
grep -q '^HTTP/1.1 200 OK' <<<"$resp" || { echo "nc: $resp"; exit 1; }

# requests an HTTP server must not answer 200 OK, and the parts of HTTP/1.1
# a client may rely on (nc: every byte as written)
http() { timeout 5 nc -N 127.0.0.1 "$port"; }
resp=$(printf 'garbage\r\n\r\n' | http)
grep -q '^HTTP/1.1 400 Bad Request' <<<"$resp" || { echo "garbage: $resp"; exit 1; }
resp=$(printf 'GET / HTTP/1.1\r\nno colon here\r\n\r\n' | http)
grep -q '^HTTP/1.1 400 ' <<<"$resp" || { echo "malformed header: $resp"; exit 1; }
resp=$(printf 'GET / HTTP/1.1\r\n\r\n' | http)
grep -q '^HTTP/1.1 400 ' <<<"$resp" || { echo "HTTP/1.1 without Host: $resp"; exit 1; }
# HEAD: the headers of a GET, no body
resp=$(printf 'HEAD / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n' | http)
grep -q '^HTTP/1.1 200 OK' <<<"$resp" && grep -q '^Content-Length: 13' <<<"$resp" ||
	{ echo "HEAD: $resp"; exit 1; }
! grep -q abcdefghijkl <<<"$resp" || { echo "HEAD answered with a body: $resp"; exit 1; }
hdrs=$(curl -sS --max-time 5 -I "http://127.0.0.1:$port/")
grep -q '^HTTP/1.1 200 OK' <<<"$hdrs" || { echo "curl -I: $hdrs"; exit 1; }
# a body that looks like a request is read as the body, not answered;
# bare-LF line endings are accepted
body=$'GET /body HTTP/1.1\r\nHost: t\r\n\r\n'
resp=$(printf 'POST / HTTP/1.1\nHost: t\nContent-Length: %d\n\n%sGET / HTTP/1.1\nHost: t\nConnection: close\n\n' \
	"${#body}" "$body" | http)
[ "$(grep -c '^HTTP/1.1 200 OK' <<<"$resp")" -eq 2 ] || { echo "body or bare LF: $resp"; exit 1; }
out=$(curl -sS --max-time 5 --data-binary "$body" "http://127.0.0.1:$port/a" "http://127.0.0.1:$port/b")
[ "$(grep -c '^abcdefghijkl$' <<<"$out")" -eq 2 ] || { echo "curl POST: $out"; exit 1; }
# a head larger than the server takes: 431, then the connection closes
resp=$( (printf 'GET / HTTP/1.1\r\nHost: t\r\nX-Big: '; head -c 20000 /dev/zero | tr '\0' a
	printf '\r\n\r\n') | http)
grep -q '^HTTP/1.1 431 ' <<<"$resp" || { echo "oversize head: $resp"; exit 1; }
resp=$(printf 'GET / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n' | http)
grep -q '^HTTP/1.1 501 ' <<<"$resp" || { echo "Transfer-Encoding: $resp"; exit 1; }

# wrk: keep-alive load, 100 connections, no socket errors, no non-2xx
w=$(wrk -t 2 -c 100 -d 2s "http://127.0.0.1:$port/")
echo "$w"
! grep -q 'Socket errors' <<<"$w" || { echo "wrk reported socket errors"; exit 1; }
! grep -q 'Non-2xx' <<<"$w" || { echo "wrk reported non-2xx responses"; exit 1; }
w=$(wrk -t 2 -c 50 -d 1s -H 'Connection: close' "http://127.0.0.1:$port/")
echo "$w"
! grep -q 'Socket errors' <<<"$w" || { echo "wrk (Connection: close) reported socket errors"; exit 1; }

# echo: nc as a plain client, then the usmc client with a checked stream
start_server echo_server.log "$echo_server" -a 127.0.0.1 -p 0 -n 2
eport=$port epid=${pids[-1]}
got=$(printf 'ping\n' | timeout 5 nc -N 127.0.0.1 "$eport")
[ "$got" = ping ] || { echo "nc echo: '$got'"; exit 1; }
"$echo_client" -b $((8 << 20)) 127.0.0.1 "$eport" | tee echo_client.log
grep -q 'mode TCP reason NOSMCRDEV' echo_client.log
wait "$epid"
grep -q 'mode TCP reason NOSMCRDEV' echo_server.log

# a bad environment value: the tools name the variable (usmc_env_check)
if err=$(USMC_PROBE_MS=abc "$echo_server" -p 0 2>&1); then
	echo "echo_server started with USMC_PROBE_MS=abc"
	exit 1
fi
grep -q 'USMC_PROBE_MS=abc: not an integer' <<<"$err" || { echo "echo_server: '$err'"; exit 1; }
echo "tools over the TCP path: OK"
