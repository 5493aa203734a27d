/* SPDX-License-Identifier: MIT */
/*
 * Whether a first contact may have a new link group, as a pure function
 * (no lock, no link group; unit-tested in tests/test_lgr_cap.c).
 * lgr_find.c counts the context's link groups under its lock and acts on
 * the verdict. docs/smcr.md "Caps" says why each rule is what it is.
 *
 * Every link group costs a verbs context, a QP, pinned buffers and, once
 * up, a thread, from the server's ACCEPT on: a client that never sends its
 * CONFIRM holds one until the handshake's deadline. So:
 *  - incoming first contacts still in their handshake hold at most half of
 *    each cap: max_per_peer / 2 per peer address, max_lgrs / 2 in all
 *    (LGR_CAP_HS_DIV), so that PROPOSALs alone never evict more than half
 *    of the idle link groups, nor take one address's room for the link
 *    groups it completes;
 *  - incoming first contacts leave the last eighth of max_lgrs
 *    (LGR_CAP_RESERVE_DIV) to our own connects;
 *  - at a full cap, idle link groups (no connection, no reference) are
 *    reclaimed, the oldest first, before anyone is refused: one idle
 *    link group costs its peer a first contact, a refusal a connection on
 *    TCP.
 */
#ifndef USMC_LGR_CAP_H
#define USMC_LGR_CAP_H

#include <stdbool.h>

/* Incoming handshakes hold at most 1/LGR_CAP_HS_DIV of each cap. */
#define LGR_CAP_HS_DIV 2
/* Incoming first contacts leave 1/LGR_CAP_RESERVE_DIV of max_lgrs (at
 * least one, unless the cap is one) to our own connects. */
#define LGR_CAP_RESERVE_DIV 8

/* The context's link groups as a new one with one peer address sees them. */
struct lgr_cap_load {
	int open;      /* counted against max_lgrs: created and not being reclaimed */
	int peer;      /* with the peer's address: published or in a first contact */
	int hs;	       /* incoming first contacts in progress */
	int peer_hs;   /* of those, from the peer's address */
	int idle;      /* published, without connection or reference: reclaimable */
	int peer_idle; /* of those, with the peer's address */
};

enum lgr_cap_refusal {
	LGR_CAP_ADMIT,	 /* room (after the reclaims the verdict names) */
	LGR_CAP_HS_PEER, /* the peer address's handshakes hold their share */
	LGR_CAP_HS_ALL,	 /* incoming handshakes hold their share of max_lgrs */
	LGR_CAP_PEER,	 /* max_per_peer, none of that address idle */
	LGR_CAP_ALL,	 /* max_lgrs (less the reserve, incoming), too few idle */
};

struct lgr_cap_verdict {
	enum lgr_cap_refusal refused;
	int reclaim_peer; /* idle ones of the peer's address to reclaim, oldest first */
	int reclaim_any;  /* then idle ones of any address, oldest first */
};

/* The handshakes' share of a cap: cap / LGR_CAP_HS_DIV, at least 1. */
int lgr_cap_hs_share(int cap);
/* The places of @max_lgrs incoming first contacts may not take. */
int lgr_cap_reserve(int max_lgrs);
/*
 * lgr_cap_decide() - may a first contact (@incoming: the peer's, we are
 * the server) with a peer address of load @l have a new link group under
 * @max_lgrs and @max_per_peer? Admitted, possibly after reclaiming the
 * idle link groups the verdict counts; else why not.
 */
struct lgr_cap_verdict lgr_cap_decide(const struct lgr_cap_load *l, int max_lgrs, int max_per_peer,
				      bool incoming);
/* A name for @r, for the log. */
const char *lgr_cap_refusal_name(enum lgr_cap_refusal r);

#endif
