/* SPDX-License-Identifier: MIT */
/*
 * The listener's decisions as pure functions, no I/O and no listener
 * (unit-tested in tests/test_listen_policy.c): backlog room, congestion,
 * admission by cost in a storm, the handshake-time histogram.
 * docs/listener.md says why each rule is what it is.
 */
#ifndef USMC_LISTEN_POLICY_H
#define USMC_LISTEN_POLICY_H

#include <stdbool.h>
#include <stdint.h>

/* Refused SMC clients in a storm (listen_storm_demand()). */
#define LISTEN_DEMAND_WINDOW_MS 250

struct listen_demand {
	int64_t since_ns; /* the window's start */
	uint64_t n;	  /* SMC clients refused in it */
};

/* How many more connections the accept thread may take now: the backlog
 * cap counts every connection being probed, in the handshake, or queued
 * for usmc_accept(). */
unsigned int listen_backlog_room(unsigned int probing_or_hs, unsigned int queued,
				 unsigned int backlog);

/*
 * One address's share (docs/listener.md "One address"). A client that
 * showed it is an SMC client holds a place of the backlog until its
 * handshake ends: while its CLC message is incomplete, in the pool,
 * parked. One source address may hold at most a LISTEN_SRC_SHARE_DIV-th of
 * the backlog that way; beyond that its new SMC clients are refused
 * (listen_src_refuse()), so the other half stays for everyone else. Not
 * less, and whatever the listener's load: one client host (a proxy, a NAT,
 * a load test) opens that many connections at once honestly, and a burst
 * of a kernel-compatible client's connections is counted before they
 * send anything, where a refusal closes them.
 */
#define LISTEN_SRC_SHARE_DIV 2

/* The share of one source address for a listener of @backlog (at least 1). */
unsigned int listen_src_share(unsigned int backlog);

/* Refuse a new SMC client from an address that holds @held handshakes of
 * a listener of @backlog? */
bool listen_src_refuse(unsigned int held, unsigned int backlog);

/*
 * How long the listener holds a CLC message whose first bytes came but not
 * the rest, from those first bytes. An honest peer sends a CLC message with
 * one send() of at most 652 bytes (CLC_PROPOSAL_MAX_LEN): one segment, or
 * two, whatever the path's MTU; a lost segment is sent again within the
 * retransmission timeout (200 ms minimum, doubling: 1.4 s for the third
 * try). Linux allows a CLC message CLC_WAIT_TIME (6 s) per receive
 * (net/smc/smc_clc.c smc_clc_wait_msg(), its SO_RCVTIMEO); we are
 * stricter: an incomplete message from a peer that can send it whole is
 * the slow-client attack, and every second of it is a backlog place held.
 */
#define LISTEN_CLC_REST_MS 2000

/* Is the handshake pool congested? @depth handshakes wait for a worker;
 * @threshold is the effective USMC_OPT_HS_CONGESTION (opts_hs_congestion). */
bool listen_hs_congested(unsigned int depth, long threshold);

/* Should an SMC client be declined at once instead of queued? */
bool listen_decline_at_once(bool auto_fallback, unsigned int depth, long threshold);

/*
 * Admission by cost. A storm is a queue that reached its
 * threshold within the last hold (listen_storm_renew()). Outside a storm
 * every SMC client is admitted (a load the workers keep up with gets SMC-R
 * for every connection); in a storm one is admitted only when no handshake
 * waits and the budget allows: at most one per LISTEN_BUDGET_DIV handshake
 * times, i.e. SMC-R handshakes take at most 1/LISTEN_BUDGET_DIV of one
 * worker while it lasts, so the storm runs at about TCP's rate.
 */
#define LISTEN_STORM_HOLD_MS	 1000 /* a first storm's hold */
#define LISTEN_STORM_HOLD_MAX_MS 8000 /* a storm that keeps coming back */
#define LISTEN_BUDGET_DIV	 10
#define LISTEN_HS_COST_DEFAULT	 (10 * 1000 * 1000L) /* ns, before one is measured */

enum listen_admit {
	LISTEN_ADMIT,	      /* to the handshake pool */
	LISTEN_DECLINE_QUEUE, /* the queue is at its threshold */
	LISTEN_DECLINE_BUDGET /* a storm, and its budget is spent */
};

struct listen_admit_state {
	int64_t storm_until_ns; /* in, out */
	int64_t storm_hold_ns;	/* in, out: 0 before the first storm */
	int64_t next_admit_ns;	/* in, out: moved on when a storm admits */
};

/*
 * Demand in a storm. The queue cannot tell whether a storm goes on: the
 * storm's SMC clients are refused before it. So the accept thread counts
 * them, and a storm whose refused SMC clients, over a window of
 * LISTEN_DEMAND_WINDOW_MS, would have kept all @workers busy at @hs_cost_ns
 * each is extended by one hold. A load the workers could serve ends its
 * storm within a hold and gets SMC-R again. Pure; returns true to extend.
 */
bool listen_storm_demand(int64_t now_ns, int64_t hs_cost_ns, long workers, struct listen_demand *d);

/*
 * An arrival at a congested queue at @now_ns: the storm starts or goes on
 * for one hold (pure). A storm that starts again within one hold of the
 * last one's end holds twice as long, up to LISTEN_STORM_HOLD_MAX_MS; one
 * after a longer calm holds LISTEN_STORM_HOLD_MS again. Why: in a storm
 * the listener falls back at SYN time, so its queue stays short and
 * nothing says the load goes on. A load that congests the queue again as
 * soon as the hold ends makes the storm flap, and each flap answers a
 * burst of SMC SYNs with the option (kernel-compat): each one then costs a
 * CLC DECLINE or an SMC-R handshake, several times a TCP connection.
 */
void listen_storm_renew(int64_t now_ns, struct listen_admit_state *st);

/* What a worker's handshake step came to, for the handshake cost. */
enum listen_step {
	LISTEN_STEP_DONE,   /* completed: SMC-R, or a DECLINE of ours that waited on nothing */
	LISTEN_STEP_FAILED, /* dropped, declined by the peer, or declined after a wait failed */
	LISTEN_STEP_PARKED, /* the client's next message is awaited without a worker */
};

/* A step that reached its final mode (listen_handshake() returned 0):
 * SMC-R (@smcr), or TCP with @reason, from the peer if @peer_declined. */
enum listen_step listen_step_final(bool smcr, bool peer_declined, uint32_t reason);

/*
 * The handshake cost (hs_cost_ns, the measure of the admission budget and
 * of a storm's demand) after a worker's step of @step_ns that came to
 * @outcome: a moving average (1/8) of the completed steps' times, each at
 * most LISTEN_HS_COST_MAX_MS. @cost_ns 0: none measured yet.
 *
 * Why only completed steps: a failed one (an LLC answer that never came,
 * a DECLINE the peer took its time to send) measures how long the peer
 * made the worker wait, not what serving a client costs; counted, a few
 * stalled handshakes made the cost seconds, and then honest demand alone
 * kept a storm, and every SMC client on TCP, for minutes. Parked steps
 * are left out too: their time is the client's.
 */
int64_t listen_hs_cost(int64_t cost_ns, int64_t step_ns, enum listen_step outcome);

/*
 * The most one step counts for. A completed step can still be slowed by
 * its peer (an LLC answer sent just before the timeout). An honest step is
 * the worker's own work and one LLC round trip on a link it just built;
 * the slowest honest connect measured in the soft-RoCE guest, a first
 * contact, took 0.09 s in all, TCP connect and client included.
 * Bounded at 0.1 s, a peer can at worst make a storm last while more than
 * workers / 0.1 s SMC clients a second are refused (20 with two workers),
 * and the budget still admits one SMC client a second in it.
 */
#define LISTEN_HS_COST_MAX_MS 100

/* The decision at @now_ns for a queue of @depth waiting handshakes (pure). */
enum listen_admit listen_admit_smcr(bool auto_fallback, unsigned int depth, long threshold,
				    int64_t now_ns, int64_t hs_cost_ns,
				    struct listen_admit_state *st);

/* Histogram bucket of a handshake that took @us microseconds. */
unsigned int listen_hist_bucket(uint64_t us);

#endif
