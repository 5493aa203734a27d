#!/usr/bin/env bash
# The harness's own acceptance, run by tools/test.sh before the rxe tests:
#  - a failing command in the guest fails the run, exit code and output intact;
#  - a hung command is stopped at the guest budget and reported (exit 124),
#    and no qemu process is left behind;
#  - --setup twopath gives two independent RoCE paths (the ctest label
#    rxe_twopath: test_twopath, test_multilink, test_multilink_kernel,
#    smc_kernel_twopath; the build tree's; rxe_twopath_known_bad is not run);
#  - --setup asym gives host A two paths to host B's one port (the ctest
#    label rxe_asym: test_multilink_asym).
# usage: harness-selftest.sh <build-dir>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: harness-selftest.sh <build-dir>}" && pwd)
vm=("$here/vm-run.sh" --build-dir "$build" --setup none -q)

out=$("${vm[@]}" -- sh -c 'echo visible-output; exit 3' 2>&1) && rc=0 || rc=$?
[ "$rc" = 3 ] || { echo "selftest: failing command gave exit $rc, want 3"; exit 1; }
grep -q visible-output <<<"$out" || { echo "selftest: guest output not shown: $out"; exit 1; }
echo "selftest: a failing command fails the run (exit 3) with its output shown"

out=$("${vm[@]}" --timeout 30 -- sleep 1000 2>&1) && rc=0 || rc=$?
# The budget runs from the guest lock (vm-run.sh waits first while another
# guest runs): the run directory, named by the time it got the lock.
run=$(readlink "${USMC_RXE_VM_DIR:-$build/rxe-vm}/last")
stamp=${run#runs/}
start=$(date -d "${stamp:0:8} ${stamp:9:2}:${stamp:11:2}:${stamp:13:2}" +%s)
took=$(($(date +%s) - start))
[ "$rc" = 124 ] || { echo "selftest: hung guest gave exit $rc, want 124: $out"; exit 1; }
grep -q 'timed out' <<<"$out" || { echo "selftest: timeout not reported: $out"; exit 1; }
[ "$took" -le 40 ] || { echo "selftest: timeout took $took s for a 30 s budget"; exit 1; }
if pgrep -f "qemu-system-x86_64.*$build/rxe-vm" >/dev/null; then
	echo "selftest: a qemu process was left running"
	exit 1
fi
echo "selftest: a hung guest is stopped at its budget ($took s for 30 s) and reported; no qemu left"

# Two RoCE paths: each carries RDMA on its own wire, one down or cut leaves
# the other working, the kernel's SMC-R uses them as documented, and
# libusmc's link groups add, spread over and fail over between them, with
# libusmc or the kernel's SMC-R at the other end. The
# tests live in the build tree: a tree without them fails here.
out=$("$here/vm-run.sh" --build-dir "$build" --setup twopath --smc -q --timeout 600 -- \
	ctest --test-dir "$build" -L '^rxe_twopath$' --output-on-failure 2>&1) && rc=0 || rc=$?
if [ "$rc" != 0 ] || ! grep -qE '^100% tests passed, 0 tests failed out of [1-9]' <<<"$out"; then
	echo "selftest: --setup twopath tests failed (exit $rc):"
	echo "$out"
	exit 1
fi
echo "selftest: --setup twopath: two independent RoCE paths, the kernel's SMC-R on them as documented"

# One host with two ports, the other with one: asymmetric link groups.
out=$("$here/vm-run.sh" --build-dir "$build" --setup asym -q --timeout 300 -- \
	ctest --test-dir "$build" -L '^rxe_asym$' --output-on-failure 2>&1) && rc=0 || rc=$?
if [ "$rc" != 0 ] || ! grep -qE '^100% tests passed, 0 tests failed out of [1-9]' <<<"$out"; then
	echo "selftest: --setup asym tests failed (exit $rc):"
	echo "$out"
	exit 1
fi
echo "selftest: --setup asym: asymmetric link groups, both ways, fail over and come back"
