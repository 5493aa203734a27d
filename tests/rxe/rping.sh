#!/usr/bin/env bash
# rxe smoke test: rping (librdmacm connection setup + RDMA read/write ping)
# from host A to host B, validating the ping data (-V).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../../tools/common/rxe-env.sh"

PORT=18602
COUNT=200
rping -s -a "$USMC_TEST_HOST_B" -p "$PORT" -C "$COUNT" -S 1024 -V >"$RXE_TMP/server.log" 2>&1 &
server=$!
RXE_PIDS+=("$server")

# Until the server listens the connection is refused or rejected: retry.
ok=0
rxe_retry_client "$server" \
	rping -c -a "$USMC_TEST_HOST_B" -I "$USMC_TEST_HOST_A" -p "$PORT" -C "$COUNT" -S 1024 -V &&
	ok=1
start=$RXE_CLIENT_START end=$EPOCHREALTIME
srv_rc=0
wait "$server" || srv_rc=$?
echo "--- client ($USMC_TEST_HOST_A -> $USMC_TEST_HOST_B)"
cat "$RXE_TMP/client.log"
echo "--- server"
cat "$RXE_TMP/server.log"
[ "$ok" = 1 ] || rxe_fail "rping client failed"
[ "$srv_rc" = 0 ] || rxe_fail "rping server exited with $srv_rc"
us=$(awk -v a="$start" -v b="$end" -v n="$COUNT" 'BEGIN{printf "%.0f", (b - a) * 1e6 / n}')
echo "PASS: rping $COUNT pings of 1024 B in $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.2f", b - a}') s (~$us us/ping incl. connect)"
