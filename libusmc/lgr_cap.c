// SPDX-License-Identifier: MIT
/*
 * The link group caps as a pure function (lgr_cap.h). Linux has no such
 * cap: it serialises all first contacts of a role instead (net/smc/af_smc.c
 * smc_server_lgr_pending), so one silent client there stalls every other
 * first contact; here handshakes with different peers run side by side and
 * the caps bound what they hold.
 */
#include "lgr_cap.h"

int lgr_cap_hs_share(int cap)
{
	int share = cap / LGR_CAP_HS_DIV;

	return share > 0 ? share : 1;
}

int lgr_cap_reserve(int max_lgrs)
{
	int reserve = max_lgrs / LGR_CAP_RESERVE_DIV;

	/* a context allowed a single link group still serves */
	if (max_lgrs < 2)
		return 0;
	return reserve > 0 ? reserve : 1;
}

static struct lgr_cap_verdict refuse(enum lgr_cap_refusal why)
{
	return (struct lgr_cap_verdict){.refused = why};
}

/* How many must go for @have to be below @limit. */
static int excess(int have, int limit)
{
	return have >= limit ? have - limit + 1 : 0;
}

struct lgr_cap_verdict lgr_cap_decide(const struct lgr_cap_load *l, int max_lgrs, int max_per_peer,
				      bool incoming)
{
	struct lgr_cap_verdict v = {LGR_CAP_ADMIT, 0, 0};
	int limit = max_lgrs - (incoming ? lgr_cap_reserve(max_lgrs) : 0);
	int need_any;

	/* handshakes in progress are never reclaimed: nothing makes room */
	if (incoming && l->peer_hs >= lgr_cap_hs_share(max_per_peer))
		return refuse(LGR_CAP_HS_PEER);
	if (incoming && l->hs >= lgr_cap_hs_share(max_lgrs))
		return refuse(LGR_CAP_HS_ALL);
	/* only the peer address's idle ones make room under its own cap;
	 * each of them is a place of max_lgrs too */
	v.reclaim_peer = excess(l->peer, max_per_peer);
	if (v.reclaim_peer > l->peer_idle)
		return refuse(LGR_CAP_PEER);
	need_any = excess(l->open, limit);
	v.reclaim_any = need_any > v.reclaim_peer ? need_any - v.reclaim_peer : 0;
	if (v.reclaim_peer + v.reclaim_any > l->idle)
		return refuse(LGR_CAP_ALL);
	return v;
}

const char *lgr_cap_refusal_name(enum lgr_cap_refusal r)
{
	switch (r) {
	case LGR_CAP_ADMIT:
		return "room";
	case LGR_CAP_HS_PEER:
		return "the address's handshakes at their share";
	case LGR_CAP_HS_ALL:
		return "incoming handshakes at their share";
	case LGR_CAP_PEER:
		return "the address's cap full, none of it idle";
	case LGR_CAP_ALL:
		return "the context's cap full, too few idle";
	}
	return "?";
}
