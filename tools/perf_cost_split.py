#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Split a whole-guest CPU profile into what each part of a connection costs.

Reads `perf script -F comm,pid,ip,sym` of a `perf record -a -g` run on
standard input and sorts every busy sample (idle ones and the profiler's
own are counted apart) into the first category, in the order below, that
one of its kernel frames names. The order matters: a doorbell's write()
that runs rxe's requester is rxe work, a TCP segment's softirq inside an
epoll_wait() is TCP work.

Prints one line per category, "key share" (share of the busy samples,
0 to 1), then "srv share" (the busy samples of --server-pid's threads),
"idle share" and "perf share" (of all samples). tools/bench-storm-rxe.sh
(STORM_PROFILE=1) prints the shares as percentages; sampling slows the
run, so CPU time per connection comes from a run without it.
"""
import argparse
import re
import sys

UNNAMED_MODULE = "[module]"
# (key, frames that put a sample there); first match wins
CATEGORIES = [
    ("rxe", ("rxe_", "ib_uverbs", "ib_poll_cq", "ib_process_cq")),  # RDMA packets and QPs
    ("tcp_conn", ("__sys_connect", "tcp_v4_connect", "__sys_accept4", "do_accept",
                  "io_accept", "inet_accept", "tcp_conn_request", "tcp_v4_syn_recv_sock",
                  "tcp_create_openreq_child")),
    ("tcp_io", ("tcp_sendmsg", "tcp_recvmsg", "__sys_sendto", "__sys_recvfrom",
                "tcp_rcv_established", "tcp_data_queue", "tcp_poll")),
    ("tcp_close", ("inet_shutdown", "tcp_close", "inet_release", "tcp_fin",
                   "tcp_time_wait", "tcp_rcv_state_process", "tcp_v4_rcv", "tcp_ack")),
    # perf sometimes leaves a process's module frames unnamed: below the
    # TCP ones, on this guest's hot paths they are rxe, ib_core, ib_uverbs
    ("rxe", (UNNAMED_MODULE,)),
    ("unix", ("unix_", "__sys_socketpair")),  # readiness descriptors
    ("epoll", ("do_epoll_wait", "do_epoll_ctl", "ep_poll")),
    ("futex", ("futex_",)),
    ("eventfd", ("eventfd_",)),
    ("smc", ("smc_", "smcr_", "__smc_")),  # the kernel's own SMC
    ("bpf", ("bpf_", "__sys_bpf")),
    ("syscall", ("do_syscall_64",)),  # other system calls
    ("irq", ("handle_softirqs", "net_rx_action", "sysvec_", "irq_exit_rcu")),
    ("kwork", ("worker_thread", "kthread", "ret_from_fork")),
]
KEYS = list(dict.fromkeys(k for k, _ in CATEGORIES)) + ["user", "kernel"]
IDLE_FRAMES = ("do_idle", "default_idle", "cpu_startup_entry")


def classify(ksyms, user_leaf):
    """@ksyms: the kernel frames (libusmc's own smcr_* are user frames)."""
    for key, prefixes in CATEGORIES:
        for s in ksyms:
            if s.startswith(prefixes):
                return key
    return "user" if user_leaf else "kernel"


def samples(lines):
    """Yield (comm, pid, [(ip, sym), ...]) per sample."""
    head, frames = None, []
    for line in lines:
        if not line.strip():
            if head:
                yield head[0], head[1], frames
            head, frames = None, []
        elif line[0] in " \t":
            parts = line.split(None, 1)
            sym = parts[1].strip() if len(parts) > 1 else "?"
            sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
            if sym == "[unknown]" and parts[0].startswith("ffffffffc"):
                sym = UNNAMED_MODULE
            frames.append((parts[0], sym))
        else:
            if head:
                yield head[0], head[1], frames
            f = line.split()
            head, frames = (f[0], f[1] if len(f) > 1 else "?"), []
    if head:
        yield head[0], head[1], frames


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-pid", default="", help="the server process")
    args = ap.parse_args()
    count = dict.fromkeys(KEYS, 0)
    busy = idle = srv = own = 0
    for comm, pid, frames in samples(sys.stdin):
        ksyms = [s for ip, s in frames if ip.startswith("ffff")]
        if comm == "swapper" or any(s in IDLE_FRAMES for s in ksyms):
            idle += 1
            continue
        if comm == "perf":  # the profiler's own work
            own += 1
            continue
        busy += 1
        srv += pid == args.server_pid
        user_leaf = bool(frames) and not frames[0][0].startswith("ffff")
        count[classify(ksyms, user_leaf)] += 1
    for k in KEYS:
        print(k, f"{count[k] / busy:.4f}" if busy else "0")
    print("srv", f"{srv / busy:.4f}" if busy else "0")
    total = busy + idle + own
    print("idle", f"{idle / total:.4f}" if total else "0")
    print("perf", f"{own / total:.4f}" if total else "0")


if __name__ == "__main__":
    main()
