#!/usr/bin/env bash
# rxe test (two hosts): usmc-stat on examples/httpd under load. httpd
# (libusmc) listens on host B; from host A, stat_http_client opens SMC-R
# connections over libusmc and a plain TCP client (nc) one more. Then
# `usmc-stat --json -p <httpd>` must conform to the schema
# (usmc_stat_check.py) and show the SMC-R connections, a server link group
# holding them with its counters and its one link (ACTIVE, its port, GIDs
# and QP numbers those of the link group's flat fields), no link event
# counted, and the TCP fallback with its reason (PEERNOSMC: the peer did
# not propose SMC); the human table the same, with the link's line under
# its link group's.
#
# Usage: test_usmc_stat_rxe.sh <httpd> <usmc-stat> <usmc_stat_check.py> <stat_http_client>
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../../tools/common/rxe-env.sh"
HTTPD=${1:?httpd}
STAT=${2:?usmc-stat}
CHECK=${3:?usmc_stat_check.py}
CLIENT=${4:?stat_http_client}
PORT=18611
N=4
A=$USMC_TEST_HOST_A B=$USMC_TEST_HOST_B
[ "$A" != "$B" ] || rxe_fail "needs two hosts (tests/rxe/vm-run.sh --setup two)"
RXE_TMP=$(mktemp -d)
pids=()
cleanup() {
	exec 3>&- 4>&- 2>/dev/null || true
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$RXE_TMP"
}
trap cleanup EXIT

"$HTTPD" -a "$B" -p "$PORT" >"$RXE_TMP/httpd.log" 2>&1 &
httpd=$!
pids+=("$httpd")
for _ in $(seq 50); do
	grep -q "usmc-stat/$httpd/" /proc/net/unix && grep -q listening "$RXE_TMP/httpd.log" && break
	sleep 0.1
done

# SMC-R clients from A, held open by fd 3
mkfifo "$RXE_TMP/in"
"$CLIENT" "$B" "$PORT" "$N" <"$RXE_TMP/in" >"$RXE_TMP/client.log" 2>&1 &
client=$!
pids+=("$client")
exec 3>"$RXE_TMP/in"
for i in $(seq 1200); do # SMC-R handshakes under TCG take a while
	grep -q '^ready' "$RXE_TMP/client.log" && break
	kill -0 "$client" 2>/dev/null || rxe_fail "client died: $(cat "$RXE_TMP/client.log")"
	[ "$i" != 1200 ] || rxe_fail "client not ready after 120 s: $(cat "$RXE_TMP/client.log")"
	sleep 0.1
done
cat "$RXE_TMP/client.log"
# a plain TCP client (no SMC), held open by fd 4
mkfifo "$RXE_TMP/in2"
# (3>&-: nc must not hold the client's stdin open)
nc -s "$A" "$B" "$PORT" <"$RXE_TMP/in2" >/dev/null 2>&1 3>&- &
pids+=($!)
exec 4>"$RXE_TMP/in2"
printf 'GET / HTTP/1.1\r\nHost: plain\r\n\r\n' >&4
for _ in $(seq 50); do
	"$STAT" --json -p "$httpd" >"$RXE_TMP/snap.json" || rxe_fail "usmc-stat exit $?"
	grep -q '"mode":"TCP"' "$RXE_TMP/snap.json" && break
	sleep 0.2
done

python3 "$CHECK" "$RXE_TMP/snap.json" --pid "$httpd" --listeners 1 --conns "SMC-R:$N" \
	--conns TCP:1 --reason PEERNOSMC --fallback PEERNOSMC --lgrs 1 --lgr-conns "$N" \
	--counter links_added=0 --counter link_failures=0 --counter failovers=0 ||
	rxe_fail "snapshot: $(cat "$RXE_TMP/snap.json")"
python3 - "$RXE_TMP/snap.json" "$N" <<'PY' || rxe_fail "link group content"
import json, sys
s = json.load(open(sys.argv[1]))[0]
n = int(sys.argv[2])
g = [g for g in s["link_groups"] if g["connections"] >= n][0]
assert g["role"] == "server" and g["state"] == "ACTIVE", g
assert g["qp_num"] and g["peer_qp_num"] and g["device"], g
assert g["local_gid"].startswith("::ffff:") and g["peer_gid"].startswith("::ffff:"), g
rmb = sum(p["in_use"] for p in g["buffers"]["rmb"])
snd = sum(p["in_use"] for p in g["buffers"]["sndbuf"])
assert rmb >= n and snd >= n, g["buffers"]
assert g["llc"]["rkey_confirmed"] >= 0, g["llc"]
smcr = [c for c in s["connections"] if c["mode"] == "SMC-R"]
assert all(c["lgr_id"] == g["id"] and c["role"] == "server" for c in smcr), smcr
assert all(c["bytes_received"] > 0 and c["bytes_sent"] > 0 for c in smcr), smcr
assert s["counters"]["smcr"] >= n and s["counters"]["lgrs_open"] >= 1, s["counters"]
assert len(g["links"]) == 1, g["links"]
k = g["links"][0]
assert k["slot"] == 0 and k["link_num"] >= 1 and k["state"] == "ACTIVE", k
for key in ("device", "port", "local_gid", "peer_gid", "qp_num", "peer_qp_num"):
    assert k[key] == g[key], (key, k, g)
assert 0 <= k["sq_used"] <= k["sq_size"], k
print("link group", g["id"], "holds", g["connections"], "connections; buffers", g["buffers"])
print("its link", k)
PY

"$STAT" -p "$httpd" >"$RXE_TMP/human.txt" || rxe_fail "usmc-stat (table) exit $?"
"$STAT" >"$RXE_TMP/all.txt" || true
cat "$RXE_TMP/all.txt"
n=$(grep -Ec "^  $B:$PORT +$A:[0-9]+ +server +SMC-R +lgr 0x" "$RXE_TMP/human.txt" || true)
[ "$n" = "$N" ] || rxe_fail "$n SMC-R lines in the table, expected $N"
grep -Eq "^  $B:$PORT +$A:[0-9]+ +server +TCP +PEERNOSMC " "$RXE_TMP/human.txt" ||
	rxe_fail "no PEERNOSMC line in the table"
grep -q "^  LGR 0x[0-9a-f]* server ACTIVE .* links=1$" "$RXE_TMP/human.txt" ||
	rxe_fail "no link group line"
grep -A1 "^  LGR 0x" "$RXE_TMP/human.txt" |
	grep -Eq "^    link [0-9]+ slot 0 ACTIVE [^ ]+/[0-9]+ gid ::ffff:$B -> ::ffff:[0-9.]+ qp [1-9][0-9]* -> [1-9][0-9]* sq [0-9]+/[0-9]+$" ||
	rxe_fail "no link line under the link group's"
grep -qx "  links_added=0 link_failures=0 failovers=0" "$RXE_TMP/human.txt" ||
	rxe_fail "no link counters line"
n=$("$STAT" -p "$httpd" --mode smcr | grep -c " SMC-R " || true)
[ "$n" = "$N" ] || rxe_fail "--mode smcr: $n lines"

# the clients close; the client context's thread and link group go away
exec 3>&-
for i in $(seq 600); do
	kill -0 "$client" 2>/dev/null || break
	[ "$i" != 600 ] || rxe_fail "client did not exit within 60 s of its stdin closing"
	sleep 0.1
done
wait "$client" || rxe_fail "client exit $?"
echo "PASS: usmc-stat shows httpd's SMC-R connections, link group and TCP fallback"
