#!/usr/bin/env bash
# rxe test: the Linux kernel's own SMC-R between the two rxe hosts. Sets a
# UEID (and reads it back), runs an AF_SMC client on host A against an AF_SMC
# server on host B and checks with the smc_diag dump that both connected
# sockets run SMC-R, not TCP fallback, and that the link group is SMC-Rv2.
# Needs the two-host topology (kernel SMC-R does not work over lo).
#
# Usage: smc_kernel_pair.sh <smc_kctl> <smc_pair>
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../../tools/common/rxe-env.sh"
KCTL=${1:?smc_kctl path}
PAIR=${2:?smc_pair path}
PORT=18603
EID=USMC-RXE-TEST

[ "$USMC_TEST_HOST_A" != "$USMC_TEST_HOST_B" ] ||
	rxe_fail "needs two hosts (tests/rxe/vm-run.sh --setup two)"
[ -d /sys/module/smc_diag ] || modprobe -a smc smc_diag || rxe_fail "cannot load smc, smc_diag"

# SMC-Rv2 needs a UEID on both ends (one kernel here: one table).
"$KCTL" ueid flush
"$KCTL" ueid add "$EID"
got=$("$KCTL" ueid show)
echo "UEID table: $got"
[ "$got" = "$EID" ] || rxe_fail "UEID read back as '$got', expected '$EID'"

"$PAIR" server "$USMC_TEST_HOST_B" "$PORT" >"$RXE_TMP/server.log" 2>&1 &
RXE_PIDS+=($!)
server=$!
# While connected, the client runs the dumps.
"$PAIR" client "$USMC_TEST_HOST_A" "$USMC_TEST_HOST_B" "$PORT" $((16 << 20)) \
	"'$KCTL' diag >'$RXE_TMP/diag.txt' && '$KCTL' lgr >'$RXE_TMP/lgr.txt'" ||
	rxe_fail "AF_SMC client failed"
wait "$server" || rxe_fail "AF_SMC server failed: $(cat "$RXE_TMP/server.log")"
cat "$RXE_TMP/server.log" "$RXE_TMP/diag.txt" "$RXE_TMP/lgr.txt"

# Two connected sockets (client and accepted server socket), both SMC-R.
a=$USMC_TEST_HOST_A:
b=$USMC_TEST_HOST_B:$PORT
n=$(grep -c "state=ACTIVE mode=SMC-R .*\(local=${a}[0-9]* peer=$b\|local=$b peer=${a}[0-9]*\) .*fallback=0x00000000" \
	"$RXE_TMP/diag.txt" || true)
[ "$n" = 2 ] || rxe_fail "expected 2 active SMC-R sockets in the smc_diag dump, found $n"
grep -q "version=SMC-Rv2" "$RXE_TMP/lgr.txt" || rxe_fail "no SMC-Rv2 link group"
echo "PASS: kernel AF_SMC pair $USMC_TEST_HOST_A -> $USMC_TEST_HOST_B runs SMC-Rv2"
