// SPDX-License-Identifier: MIT
/* The listener's pure decisions (listen_policy.h). */
#include <usmc/usmc.h>

#include "listen_policy.h"
#include "reason.h"

unsigned int listen_backlog_room(unsigned int probing_or_hs, unsigned int queued,
				 unsigned int backlog)
{
	unsigned long used = (unsigned long)probing_or_hs + queued;

	return used >= backlog ? 0 : (unsigned int)(backlog - used);
}

unsigned int listen_src_share(unsigned int backlog)
{
	return backlog >= LISTEN_SRC_SHARE_DIV ? backlog / LISTEN_SRC_SHARE_DIV : 1;
}

bool listen_src_refuse(unsigned int held, unsigned int backlog)
{
	return held >= listen_src_share(backlog);
}

bool listen_hs_congested(unsigned int depth, long threshold)
{
	/* threshold 0 cannot come from opts_hs_congestion(); treat it as
	 * "never idle enough", i.e. congested, rather than divide hairs */
	return threshold <= 0 || depth >= (unsigned long)threshold;
}

bool listen_decline_at_once(bool auto_fallback, unsigned int depth, long threshold)
{
	return auto_fallback && listen_hs_congested(depth, threshold);
}

void listen_storm_renew(int64_t now_ns, struct listen_admit_state *st)
{
	const int64_t base = LISTEN_STORM_HOLD_MS * 1000000LL;
	const int64_t max = LISTEN_STORM_HOLD_MAX_MS * 1000000LL;
	int64_t hold = st->storm_hold_ns > 0 ? st->storm_hold_ns : base;

	if (now_ns >= st->storm_until_ns) { /* not in a storm: one starts */
		if (st->storm_hold_ns > 0 && now_ns < st->storm_until_ns + hold)
			hold = hold < max / 2 ? 2 * hold : max; /* it came back */
		else
			hold = base;
	}
	st->storm_hold_ns = hold;
	st->storm_until_ns = now_ns + hold;
}

bool listen_storm_demand(int64_t now_ns, int64_t hs_cost_ns, long workers, struct listen_demand *d)
{
	int64_t cost = hs_cost_ns > 0 ? hs_cost_ns : LISTEN_HS_COST_DEFAULT;
	int64_t span = now_ns - d->since_ns;
	bool busy;

	d->n++;
	if (span < LISTEN_DEMAND_WINDOW_MS * 1000000LL)
		return false;
	/* their handshakes, one after another, against the workers' time */
	busy = (double)d->n * (double)cost >= (double)span * (double)(workers > 0 ? workers : 1);
	d->since_ns = now_ns;
	d->n = 0;
	return busy;
}

enum listen_admit listen_admit_smcr(bool auto_fallback, unsigned int depth, long threshold,
				    int64_t now_ns, int64_t hs_cost_ns,
				    struct listen_admit_state *st)
{
	int64_t cost = hs_cost_ns > 0 ? hs_cost_ns : LISTEN_HS_COST_DEFAULT;

	if (!auto_fallback)
		return LISTEN_ADMIT;
	if (listen_hs_congested(depth, threshold)) {
		listen_storm_renew(now_ns, st);
		return LISTEN_DECLINE_QUEUE;
	}
	if (now_ns >= st->storm_until_ns)
		return LISTEN_ADMIT;
	if (depth || now_ns < st->next_admit_ns)
		return LISTEN_DECLINE_BUDGET;
	st->next_admit_ns = now_ns + cost * LISTEN_BUDGET_DIV;
	return LISTEN_ADMIT;
}

enum listen_step listen_step_final(bool smcr, bool peer_declined, uint32_t reason)
{
	if (smcr)
		return LISTEN_STEP_DONE;
	/* a peer's DECLINE may come whenever the peer likes */
	if (peer_declined)
		return LISTEN_STEP_FAILED;
	/* Linux's classes of decline (net/smc/smc_clc.h): resources (0x01)
	 * and configuration (0x03) are decided from the PROPOSAL and this
	 * host alone; timeouts (0x02), sync (0x04) and the internal errors of
	 * a link's setup (0x09) come after a wait on the peer that failed */
	switch (reason >> 24) {
	case SMC_CLC_DECL_MEM >> 24:
	case SMC_CLC_DECL_CNFERR >> 24:
		return LISTEN_STEP_DONE;
	}
	return LISTEN_STEP_FAILED;
}

int64_t listen_hs_cost(int64_t cost_ns, int64_t step_ns, enum listen_step outcome)
{
	const int64_t max = LISTEN_HS_COST_MAX_MS * 1000000LL;

	if (outcome != LISTEN_STEP_DONE)
		return cost_ns;
	if (step_ns > max)
		step_ns = max;
	return cost_ns ? cost_ns + (step_ns - cost_ns) / 8 : step_ns;
}

unsigned int listen_hist_bucket(uint64_t us)
{
	unsigned int b = 0;

	while (us > 1 && b < USMC_HS_HIST_BUCKETS - 1) {
		us >>= 1;
		b++;
	}
	return b;
}
