/* SPDX-License-Identifier: MIT */
/*
 * Counters of the SMC-R data path (struct usmc_engine_stats in usmc.h):
 * one set per link group, counted by whichever thread does the work, and
 * one per context for the link groups already freed. Relaxed atomics: a
 * snapshot is a sum, not a consistent cut.
 */
#ifndef USMC_ENG_STATS_H
#define USMC_ENG_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include <usmc/usmc.h>

enum eng_stat {
	ENG_CQES,      /* work completions polled */
	ENG_WAKEUPS,   /* data-path sleeps that ended (condition variable or channel) */
	ENG_CH_SLEEPS, /* of them, on the completion channel */
	ENG_SPINS_OK,  /* waits a spin on the CQ ended before any sleep */
	ENG_DOORBELLS, /* ibv_post_send() calls */
	ENG_CQ_ARMS,   /* ibv_req_notify_cq() calls */
	ENG_READY_OPS, /* readiness descriptor writes and reads */
	ENG_SYSCALLS,  /* data-path system calls, as the library counts them */
	ENG_NSTATS
};

struct eng_stats {
	atomic_uint_least64_t v[ENG_NSTATS];
};

static inline void eng_count(struct eng_stats *s, enum eng_stat i, uint64_t n)
{
	atomic_fetch_add_explicit(&s->v[i], n, memory_order_relaxed);
}

/* Add @s into the public struct @out. */
static inline void eng_stats_add(const struct eng_stats *s, struct usmc_engine_stats *out)
{
	uint64_t v[ENG_NSTATS];

	for (int i = 0; i < ENG_NSTATS; i++)
		v[i] = atomic_load_explicit(&s->v[i], memory_order_relaxed);
	out->cqes += v[ENG_CQES];
	out->wakeups += v[ENG_WAKEUPS];
	out->channel_sleeps += v[ENG_CH_SLEEPS];
	out->spins_ok += v[ENG_SPINS_OK];
	out->doorbells += v[ENG_DOORBELLS];
	out->cq_arms += v[ENG_CQ_ARMS];
	out->ready_ops += v[ENG_READY_OPS];
	out->syscalls += v[ENG_SYSCALLS];
}

/* Add every counter of @s into @dst (a link group retires into its context). */
static inline void eng_stats_merge(struct eng_stats *dst, const struct eng_stats *s)
{
	for (int i = 0; i < ENG_NSTATS; i++)
		atomic_fetch_add_explicit(&dst->v[i],
					  atomic_load_explicit(&s->v[i], memory_order_relaxed),
					  memory_order_relaxed);
}

#endif
