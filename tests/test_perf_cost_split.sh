#!/usr/bin/env bash
# tools/perf_cost_split.py on a hand-made `perf script -F comm,pid,ip,sym`
# of six samples: the first matching category wins (a doorbell's write()
# that runs rxe is rxe work), unnamed module frames count as rxe below
# TCP, idle and the profiler's own samples are counted apart, and the
# server process's share is its busy samples'.
set -euo pipefail
split=$(dirname "$0")/../tools/perf_cost_split.py
out=$(python3 "$split" --server-pid 42 <<'PERF'
usmc_storm 42
	ffffffff81000001 rxe_requester
	ffffffff81000002 vfs_write
	ffffffff81000003 do_syscall_64
	7f0000000001 __libc_write

usmc_storm 43
	ffffffff81000004 tcp_sendmsg
	ffffffffc0000005 [unknown]
	ffffffff81000003 do_syscall_64

usmc-lgr/100 42
	ffffffffc0000006 [unknown]
	ffffffff81000007 worker_thread

usmc_storm 43
	7f0000000002 smcr_eng_progress

swapper 0
	ffffffff81000008 pv_native_safe_halt
	ffffffff81000009 do_idle

perf 7
	ffffffff8100000a ep_poll
PERF
)
want() { # key share
	grep -qx "$1 $2" <<<"$out" || { echo "FAIL: want '$1 $2' in:"; echo "$out"; exit 1; } >&2
}
want rxe 0.5000     # the doorbell, and the unnamed module frame in a worker
want tcp_io 0.2500  # TCP beats the unnamed module frame below it
want user 0.2500    # libusmc's smcr_* is user space, not the kernel's SMC
want smc 0.0000
want kwork 0.0000
want srv 0.5000
want idle 0.1667
want perf 0.1667
echo "PASS: perf_cost_split.py"
