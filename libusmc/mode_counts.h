/* SPDX-License-Identifier: MIT */
/*
 * Connections by the mode they reached, and fallbacks by reason: counted
 * once per context (ctx.c, every connection) and once per listener
 * (listen.c, connections it hands out), read by the *_stats() and
 * *_fallback_count() API calls. Atomic counters: no lock.
 */
#ifndef USMC_MODE_COUNTS_H
#define USMC_MODE_COUNTS_H

#include <stdatomic.h>
#include <stdint.h>

#include <usmc/usmc.h>

#include "reason.h"

struct mode_counts {
	atomic_uint_least64_t smcr, fallbacks;
	atomic_uint_least64_t fallback_by_reason[USMC_REASON_SLOTS];
};

/* Count a connection that reached @mode (for TCP, because of @reason). */
static inline void mode_counts_add(struct mode_counts *m, enum usmc_mode mode, uint32_t reason)
{
	if (mode == USMC_MODE_SMCR) {
		atomic_fetch_add(&m->smcr, 1);
		return;
	}
	atomic_fetch_add(&m->fallbacks, 1);
	atomic_fetch_add(&m->fallback_by_reason[usmc_reason_slot(reason)], 1);
}

/* Fallbacks because of @reason. */
static inline uint64_t mode_counts_fallbacks(const struct mode_counts *m, uint32_t reason)
{
	unsigned int slot = usmc_reason_slot(reason);

	/* Unknown codes share a slot: report them only when asked for one. */
	if (slot == USMC_REASON_SLOTS - 1 && usmc_reason_lookup(reason))
		return 0;
	return atomic_load(&m->fallback_by_reason[slot]);
}

#endif
