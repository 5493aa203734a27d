/* SPDX-License-Identifier: MIT */
/*
 * Whether, and how long, a thread that waits for a reply may spin on the
 * CQ (smcr_eng.c, docs/smcr.md "Run to completion"): a spin pays only while
 * it is shorter than the sleep and wake-up it saves, and only on a CPU
 * that nobody else needs: the peer's threads and rxe's workers that carry
 * the reply run on the same machine.
 *
 * The cap is timed once per process (smcr_spin_cap_ns()). A spinner takes
 * one of the process's slots (smcr_spin_get()): half the CPUs this thread
 * may really use, none with one CPU. Those are its affinity mask
 * (sched_getaffinity()) and its cgroup's CPU quota (cgroup v2 cpu.max, v1
 * cpu.cfs_quota_us / cpu.cfs_period_us, the smallest up the hierarchy),
 * read again at most once a second.
 */
#ifndef USMC_SMCR_SPIN_H
#define USMC_SMCR_SPIN_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#define SMCR_SPIN_NO_QUOTA INT_MAX /* smcr_spin_quota_cpus(): no limit */

/* The longest spin on this machine, in ns (timed at the first call). */
int64_t smcr_spin_cap_ns(void);

/* A spinner's slot for the calling thread, if a CPU is free for it; give
 * it back with smcr_spin_put(). @now_ms: clock_now_ms(). */
bool smcr_spin_get(long now_ms);
void smcr_spin_put(void);

/* The CPUs the calling thread may use: its affinity, its cgroup's quota. */
int smcr_spin_cpus(long now_ms);

/*
 * The whole CPUs the quota of cgroup @path (as /proc/self/cgroup names it)
 * and of each of its ancestors allows, under the hierarchy mounted at
 * @root (v2: cpu.max; v1: cpu.cfs_quota_us and cpu.cfs_period_us): the
 * smallest, rounded down; SMCR_SPIN_NO_QUOTA if none sets one.
 */
int smcr_spin_quota_cpus(const char *root, const char *path);

#endif
