/* SPDX-License-Identifier: MIT */
/*
 * A defect of the guest kernel's soft-RoCE driver that kills a Linux SMC-R
 * peer's link under packet loss (docs/faults.md, "Known defects"), and the
 * kprobe that tells when it struck.
 *
 * Linux SMC-R registers each new buffer with a fast-register work request
 * (IB_WR_REG_MR) on the link's own send queue (net/smc/smc_wr.c
 * smc_wr_reg_send()). When a SEND posted before it is retransmitted, rxe's
 * requester rewinds to that SEND (drivers/infiniband/sw/rxe/rxe_req.c
 * req_retry()) and then runs the REG_MR again, although it was done:
 * rxe_reg_fast_mr() (rxe_mr.c) finds the MR no longer free and fails, and
 * the requester puts the QP in the error state. The kernel's REG_MR never
 * completes, smc_wr_reg_send() gives up after 5 s, the connection is
 * declined with ERR_REGBUF and the link goes down, taking the link group's
 * other connections with it. usmc registers with ibv_reg_mr() and posts no
 * REG_MR, so only a kernel peer's QP is hit, against usmc or the kernel.
 *
 * The watch is a return probe on rxe_reg_fast_mr() that records its
 * failures only: outside this defect it fails only on a caller's bug.
 * Needs root and tracefs (the guest).
 */
#ifndef USMC_TEST_RXE_REGMR_WATCH_H
#define USMC_TEST_RXE_REGMR_WATCH_H

#include <stdio.h>
#include <string.h>

#include "fault_net.h"

#define RXE_REGMR_TRACEFS "/sys/kernel/tracing"
#define RXE_REGMR_EVENT	  "usmc_rxe_regmr_fail"

static inline void rxe_regmr_watch_stop(void)
{
	system("{ echo 0 > " RXE_REGMR_TRACEFS "/events/kprobes/" RXE_REGMR_EVENT
	       "/enable; echo '-:" RXE_REGMR_EVENT "' >> " RXE_REGMR_TRACEFS
	       "/kprobe_events; } 2>/dev/null");
}

/*
 * Turn off what would patch kernel text beyond the probe itself. Enabling
 * any trace event with the record-cmd option on (the default) registers
 * probes on sched_switch and sched_wakeup (kernel/trace/trace_events.c
 * __ftrace_event_enable_disable(), tracing_start_cmdline_record()), and
 * the kprobe optimizer replaces the probe's int3 with a jump: each flips
 * code on the scheduler's hot path with text_poke_bp(). Under qemu TCG
 * a vCPU can still run a translated int3 after the patch is done, and
 * poke_int3_handler(), finding no patch under way, oopses: a CI run's
 * guest panicked so in ttwu_do_activate()'s trace_sched_wakeup() as this
 * watch started. An unoptimized kprobe tolerates a stale int3
 * (kprobe_int3_handler()).
 */
static inline int rxe_regmr_watch_quiet(void)
{
	return fnet_sh("echo 0 > " RXE_REGMR_TRACEFS "/options/record-cmd && "
		       "echo 0 > " RXE_REGMR_TRACEFS "/options/record-tgid && "
		       "echo 0 > /proc/sys/debug/kprobes-optimization");
}

/* Start counting rxe_reg_fast_mr() failures from now; 0 or -1. */
static inline int rxe_regmr_watch_start(void)
{
	rxe_regmr_watch_stop();
	if (fnet_sh("mountpoint -q " RXE_REGMR_TRACEFS
		    " || mount -t tracefs nodev " RXE_REGMR_TRACEFS))
		return -1;
	if (rxe_regmr_watch_quiet())
		return -1;
	if (fnet_sh("echo 'r:" RXE_REGMR_EVENT
		    " rxe_reg_fast_mr ret=$retval:s32' >> " RXE_REGMR_TRACEFS "/kprobe_events"))
		return -1;
	return fnet_sh(
		"cd " RXE_REGMR_TRACEFS " && echo 'ret != 0' > events/kprobes/" RXE_REGMR_EVENT
		"/filter && : > trace && echo 1 > events/kprobes/" RXE_REGMR_EVENT "/enable");
}

/* Failures of rxe_reg_fast_mr() since rxe_regmr_watch_start(), or -1. */
static inline long rxe_regmr_watch_count(void)
{
	FILE *f = fopen(RXE_REGMR_TRACEFS "/trace", "r");
	char line[512];
	long n = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		n += line[0] != '#' && strstr(line, RXE_REGMR_EVENT ":") != NULL;
	fclose(f);
	return n;
}

#endif
