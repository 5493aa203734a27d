#!/usr/bin/env bash
# rxe smoke test: ibv_rc_pingpong (RC send/recv) from host A to host B.
# Server on device B with its IPv4-mapped RoCE v2 GID index (RoCE v2 needs a
# GID: -g), client on device A connecting to B's address.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../../tools/common/rxe-env.sh"

PORT=18601
ARGS=(-p "$PORT" -s 4096 -n 1000 -c)
ibv_rc_pingpong -d "$USMC_TEST_RXE_B" -g "$USMC_TEST_GID_INDEX_B" "${ARGS[@]}" \
	>"$RXE_TMP/server.log" 2>&1 &
server=$!
RXE_PIDS+=("$server")

# The server may not listen yet: retry while the TCP exchange is refused.
ok=0
RXE_RETRY_IF="Couldn't connect" rxe_retry_client "$server" \
	ibv_rc_pingpong -d "$USMC_TEST_RXE_A" -g "$USMC_TEST_GID_INDEX_A" "${ARGS[@]}" \
	"$USMC_TEST_HOST_B" && ok=1
srv_rc=0
wait "$server" || srv_rc=$?
echo "--- client ($USMC_TEST_RXE_A gid $USMC_TEST_GID_INDEX_A -> $USMC_TEST_HOST_B)"
cat "$RXE_TMP/client.log"
echo "--- server ($USMC_TEST_RXE_B gid $USMC_TEST_GID_INDEX_B)"
cat "$RXE_TMP/server.log"
[ "$ok" = 1 ] || rxe_fail "ibv_rc_pingpong client failed"
[ "$srv_rc" = 0 ] || rxe_fail "ibv_rc_pingpong server exited with $srv_rc"
grep -q "usec/iter" "$RXE_TMP/client.log" || rxe_fail "no result line from the client"
echo "PASS: ibv_rc_pingpong $(grep 'usec/iter' "$RXE_TMP/client.log")"
