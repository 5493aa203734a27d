#!/usr/bin/env bash
# Runs one command inside a throw-away qemu guest (TCG) that boots Debian's
# 6.12 kernel and has soft-RoCE (rdma_rxe) devices; see docs/soft-roce.md.
#
#   tests/rxe/vm-run.sh [options] -- <command...>
#
# The guest sees the host's root read-only (9p, tmpfs overlay on top), so the
# command runs the host's own binaries and the build tree in place, in the
# current directory and with the current environment. Its output (stdout and
# stderr merged) is streamed here; vm-run.sh exits with its exit code, 124
# when the guest timed out, 125 when the guest failed before running it.
#
# Options:
#   --timeout S      wall-clock budget of the whole guest (default 600 s)
#   --setup T        none | one | two | twopath | asym (default two):
#                      one: rxe0 on dummy0 10.0.0.1 (loopback use)
#                      two: rxe0 on veth0 10.0.0.1, rxe1 on veth1 10.0.0.2
#                      twopath: two, and a second path: rxe2 on veth2
#                        10.0.1.1, rxe3 on veth3 10.0.1.2
#                      asym: host A as twopath's (rxe0, rxe2), host B one
#                        port: rxe1 on the bridge br1 over veth1 and veth3,
#                        10.0.0.2 and 10.0.1.2
#   --smc            also load the kernel's smc and smc_diag modules
#   --build-dir D    build tree holding the guest cache (default: $USMC_BUILD_DIR,
#                    else the current directory if it has a CMakeCache.txt,
#                    else <source>/build)
#   -q, --quiet      no timing summary on stderr
# Environment: USMC_RXE_VM_DIR (cache dir, default <build>/rxe-vm),
#   USMC_RXE_MEM (guest MiB, default 1024), USMC_RXE_SMP (vCPUs, default 2).
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$SRC/../.." && pwd)
TIMEOUT=600
SETUP=two
SMC=0
QUIET=0
BUILD=${USMC_BUILD_DIR:-}

usage() { # [exit code]
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
	exit "${1:-2}"
}
say() { echo "vm-run: $*" >&2; }

while [ $# -gt 0 ]; do
	case "$1" in
	--timeout) TIMEOUT=${2:?}; shift 2 ;;
	--timeout=*) TIMEOUT=${1#*=}; shift ;;
	--setup) SETUP=${2:?}; shift 2 ;;
	--setup=*) SETUP=${1#*=}; shift ;;
	--smc) SMC=1; shift ;;
	--build-dir) BUILD=${2:?}; shift 2 ;;
	--build-dir=*) BUILD=${1#*=}; shift ;;
	-q | --quiet) QUIET=1; shift ;;
	--) shift; break ;;
	-h | --help) usage 0 ;;
	*) say "unknown option $1"; usage ;;
	esac
done
[ $# -gt 0 ] || { say "no command given"; usage; }
case "$SETUP" in none | one | two | twopath | asym) ;; *) say "bad --setup $SETUP"; usage ;; esac
if ! [[ "$TIMEOUT" =~ ^[0-9]+$ ]] || [ "$TIMEOUT" -lt 10 ]; then
	say "bad --timeout $TIMEOUT (seconds, at least 10)"
	exit 2
fi

if [ -z "$BUILD" ]; then
	if [ -e CMakeCache.txt ]; then BUILD=$PWD; else BUILD=$TOP/build; fi
fi
mkdir -p "$BUILD"
BUILD=$(cd "$BUILD" && pwd)
VM=${USMC_RXE_VM_DIR:-$BUILD/rxe-vm}
KVER=${USMC_RXE_KVER:-6.12.117+deb12-amd64}

# Kernel + initramfs, fetched and built once per cache dir.
"$SRC/prepare.sh" "$VM"
VM=$(cd "$VM" && pwd)

# 2 shared cores: one guest at a time on this machine.
# A fixed path (not $TMPDIR) so that every worktree and user shares it.
LOCK=${USMC_RXE_LOCK:-/tmp/usmc-rxe-vm.lock}
# Another user's lock file may not be writable: fall back to the cache dir.
{ exec 8>>"$LOCK"; } 2>/dev/null || { LOCK=$VM/.vm.lock && exec 8>>"$LOCK"; }
chmod a+rw "$LOCK" 2>/dev/null || true
if ! flock -n 8; then
	say "waiting for another guest to finish ($LOCK)"
	flock 8
fi

# One result directory per run, shared writable with the guest; keep 10.
RUN=$VM/runs/$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$RUN"
ln -sfn "runs/$(basename "$RUN")" "$VM/last"
ls -1dt "$VM"/runs/*/ 2>/dev/null | tail -n +11 | xargs -r rm -rf

# Parameters for guest-run.sh, bash-quoted (no kernel command line quoting).
{
	printf 'VM_SETUP=%q\nVM_SMC=%q\nVM_TIMEOUT=%q\n' "$SETUP" "$SMC" "$TIMEOUT"
	printf 'VM_KDIR=%q\nVM_KVER=%q\nVM_CWD=%q\n' "$VM/kernel" "$KVER" "$PWD"
	printf 'VM_BUILD=%q\n' "$BUILD"
	printf 'VM_CMD=('
	printf '%q ' "$@"
	printf ')\n'
} >"$RUN/params.sh"
# The caller's environment, minus what belongs to this host session only.
for name in $(compgen -e); do
	case "$name" in
	PWD | OLDPWD | SHLVL | _ | HOSTNAME | BASHOPTS | SHELLOPTS | XDG_RUNTIME_DIR | \
		DBUS_SESSION_BUS_ADDRESS | SSH_* | DISPLAY | WAYLAND_DISPLAY | INVOCATION_ID | \
		JOURNAL_STREAM | TERM | COLUMNS | LINES) continue ;;
	esac
	printf 'export %s=%q\n' "$name" "${!name}"
done >"$RUN/env.sh"
# The command writes to a terminal in the guest (ttyS0): let it colour its
# output only when ours is a terminal too.
if [ -t 1 ]; then
	printf 'export TERM=%q\n' "${TERM:-vt100}" >>"$RUN/env.sh"
else
	echo 'export TERM=dumb' >>"$RUN/env.sh"
fi
printf '#!/bin/bash\nexec /bin/bash %q\n' "$SRC/guest-run.sh" >"$RUN/start.sh"

# Command output (ttyS0) goes to output.log, streamed to stdout by tail;
# kernel console and init messages (ttyS1) to console.log. tsc=reliable:
# no clocksource watchdog on the TSC, which under TCG on a busy host can
# find it skewed, mark it unstable mid-run and so patch the scheduler's
# sched_clock_stable() branch live (an "Oops: int3" in sched_clock_cpu(),
# docs/soft-roce.md); TCG's TSC is one virtual clock for every vCPU.
# shellcheck disable=SC2054 # commas belong to qemu's option syntax
QEMU=(qemu-system-x86_64 -nodefaults -no-user-config -machine pc
	-accel tcg,thread=multi,tb-size=128 -cpu max
	-smp "${USMC_RXE_SMP:-2}" -m "${USMC_RXE_MEM:-1024}"
	-display none -monitor none -no-reboot
	-serial "file:$RUN/output.log" -serial "file:$RUN/console.log"
	-kernel "$VM/kernel/boot/vmlinuz-$KVER" -initrd "$VM/initrd-$KVER.cpio.gz"
	-append "console=ttyS1 panic=-1 mitigations=off tsc=reliable quiet loglevel=4"
	-fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap
	-device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot
	-fsdev "local,id=usmcrun,path=${RUN//,/,,},security_model=none"
	-device virtio-9p-pci,fsdev=usmcrun,mount_tag=usmcrun)
printf '%q ' "${QEMU[@]}" >"$RUN/qemu.cmd"

# A guest that dies before its script starts (a kernel Oops while booting
# under TCG, seen once in ~1000 boots) is booted once more: it ran nothing.
for attempt in 1 2; do
	: >"$RUN/output.log"
	T0=$EPOCHREALTIME
	# Host-side bound: SIGTERM at the timeout, SIGKILL 5 s later.
	timeout -k 5 "$TIMEOUT" "${QEMU[@]}" </dev/null >"$RUN/qemu.log" 2>&1 &
	QPID=$!
	# Never leave a guest behind: Ctrl-C, SIGTERM or an error here kill it.
	cleanup() {
		if kill -0 "$QPID" 2>/dev/null; then
			kill -TERM "$QPID" 2>/dev/null || true
			sleep 1
			kill -KILL -- -"$QPID" 2>/dev/null || kill -KILL "$QPID" 2>/dev/null || true
		fi
	}
	trap cleanup EXIT
	trap 'say "interrupted"; exit 130' INT TERM HUP

	# Stream the command's output while qemu runs; tail exits once qemu is gone.
	tail -n +1 -s 0.2 -f --pid="$QPID" "$RUN/output.log" &
	TPID=$!
	# Record (host clock) when the guest reaches each phase: it touches files.
	phases=(script setup cmd-start cmd-end)
	declare -A seen=()
	while kill -0 "$QPID" 2>/dev/null; do
		for p in "${phases[@]}"; do
			if [ -z "${seen[$p]:-}" ] && [ -e "$RUN/phase-$p" ]; then
				seen[$p]=$EPOCHREALTIME
			fi
		done
		sleep 0.1
	done
	set +e
	wait "$QPID"
	QRC=$?
	set -e
	T_END=$EPOCHREALTIME
	wait "$TPID" 2>/dev/null || true
	trap - EXIT
	if [ "$attempt" = 1 ] && [ -z "${seen[script]:-}" ] && [ ! -s "$RUN/rc" ] &&
		[ "$QRC" -ne 124 ] && [ "$QRC" -ne 137 ]; then
		say "guest died before the command started (qemu exit $QRC): booting once more"
		grep -m1 -E 'Kernel panic|BUG:|Oops' "$RUN/console.log" >&2 || true
		mv "$RUN/console.log" "$RUN/console-boot1.log"
		continue
	fi
	break
done

# Seconds between two $EPOCHREALTIME stamps, or "?" if one is missing.
dt() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b - a}' || echo "?"; }
{
	echo "boot_to_script $(dt "$T0" "${seen[script]:-}")"
	echo "setup $(dt "${seen[script]:-}" "${seen[cmd-start]:-}")"
	echo "command $(dt "${seen[cmd-start]:-}" "${seen[cmd-end]:-}")"
	echo "shutdown $(dt "${seen[cmd-end]:-}" "$T_END")"
	echo "total $(dt "$T0" "$T_END")"
	echo "qemu_exit $QRC"
} >"$RUN/timing.txt"
[ "$QUIET" = 1 ] || say "$(tr '\n' ' ' <"$RUN/timing.txt" | sed 's/ \([a-z_]*\) /, \1 /g; s/_/ /g')(s); logs: $RUN"

if [ -s "$RUN/rc" ]; then
	RC=$(<"$RUN/rc")
	if [ -e "$RUN/timed-out" ]; then
		say "guest timed out: the command was stopped at the ${TIMEOUT} s budget"
		RC=124
	fi
	if [ "$QRC" -ne 0 ]; then
		say "warning: guest did not power off cleanly (qemu exit $QRC)"
	fi
	[ "$RC" -eq 0 ] || [ "$RC" -eq 124 ] || say "command failed with exit code $RC"
	exit "$RC"
fi
if [ "$QRC" -eq 124 ] || [ "$QRC" -eq 137 ]; then
	say "guest timed out: killed after ${TIMEOUT} s (no result); console:"
	RC=124
else
	say "guest ended without a result (crash, panic or failed boot; qemu exit $QRC); console:"
	RC=125
fi
grep -m1 -E 'Kernel panic|BUG:|Oops' "$RUN/console.log" >&2 || true
tail -n 30 "$RUN/console.log" >&2 || true
[ ! -s "$RUN/qemu.log" ] || { say "qemu said:"; cat "$RUN/qemu.log" >&2; }
exit "$RC"
