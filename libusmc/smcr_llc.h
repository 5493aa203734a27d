/* SPDX-License-Identifier: MIT */
/*
 * LLC flows of a link group (net/smc/smc_llc.c): sending LLC messages,
 * running one locally started request/response flow at a time, answering
 * the peer's requests, and TEST_LINK keepalive. The codec is wire/llc.h.
 */
#ifndef USMC_SMCR_LLC_H
#define USMC_SMCR_LLC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "llc.h"

#define SMCR_LLC_WAIT_MS  2000	/* SMC_LLC_WAIT_TIME */
#define SMCR_FLOW_WAIT_MS 20000 /* waiting for a running LLC flow to end */
/* an event-run flow's owner looks for its end by then: the flows queued
 * before it, then its own answer (bounded by SMCR_LLC_WAIT_MS itself) */
#define SMCR_LLC_FLOW_DUE_MS (2 * SMCR_LLC_WAIT_MS)
#define SMCR_TESTLINK_MS     30000 /* SMC_LLC_TESTLINK_DEFAULT_TIME */
/* an answer awaited while the peer keeps talking: this long at most */
#define SMCR_LLC_ANSWER_MAX_MS SMCR_TESTLINK_MS

/*
 * Until when an LLC answer asked for at @asked_ms is awaited, the link's
 * last receive at @last_rx_ms (and whether it still is at @now):
 * SMCR_LLC_WAIT_MS from the peer's last word, SMCR_LLC_ANSWER_MAX_MS at
 * most. A peer that still sends is alive,
 * and its answer comes behind what it sends (RC order): on a lossy or
 * congested link, seconds behind. Linux asks TEST_LINK only of a link
 * silent for its testlink time (net/smc/smc_llc.c smc_llc_testlink_work()),
 * where this is its SMC_LLC_WAIT_TIME.
 */
static inline long smcr_llc_answer_due_ms(long asked_ms, long last_rx_ms)
{
	long quiet_since = last_rx_ms > asked_ms ? last_rx_ms : asked_ms;
	long due = quiet_since + SMCR_LLC_WAIT_MS;

	return due < asked_ms + SMCR_LLC_ANSWER_MAX_MS ? due : asked_ms + SMCR_LLC_ANSWER_MAX_MS;
}

static inline bool smcr_llc_answer_waits(long now, long asked_ms, long last_rx_ms)
{
	return now <= smcr_llc_answer_due_ms(asked_ms, last_rx_ms);
}

struct lgr;
struct smcr_link;

/*
 * Answers to the peer's requests that found the send queue full, kept
 * until room comes back (smcr_llc_send_owed()). The peer runs one flow at
 * a time, besides its TEST_LINK: a handful covers an honest one, and a
 * peer with more requests unanswered than this gets no more answers kept.
 */
#define SMCR_LLC_OWED 8

/*
 * Flows run as events (smcr_llc_flow_start()) started or waiting at once:
 * handshakes on one link group, each with a CONFIRM_RKEY for a new RMB (a
 * storm's first connections) or a first contact's CONFIRM_LINK; one per
 * connection a link group can have (SMC_CONN_PER_LGR_MAX), so an honest
 * load never finds them taken. More are told -EBUSY and ask again after
 * the next handshake event, which a slot given back makes then: with 64
 * slots, 256 clients' first connections asked again at every one, and 99 %
 * had their ACCEPT within 4.2 s (the kernel's server: 1.2 s).
 */
#define SMCR_LLC_FLOW_SLOTS 255

/* An event-run flow, from smcr_llc_flow_start() to its result or abandon. */
struct smcr_llc_slot {
	uint32_t ticket; /* 0: the slot is free */
	enum { LLC_SLOT_WAITING, LLC_SLOT_RUNNING, LLC_SLOT_DONE } state;
	uint8_t type; /* the request's, and its response's */
	int rc;	      /* LLC_SLOT_DONE: 0 (the response is in resp) or the send's error */
	long sent_ms; /* LLC_SLOT_RUNNING: when the request left */
	uint8_t req[LLC_MSG_LEN];  /* encoded */
	uint8_t resp[LLC_MSG_LEN]; /* LLC_SLOT_DONE: as received */
	int resp_len;
};

/* A link group's LLC state (struct lgr.llc). */
struct smcr_llc {
	pthread_mutex_t lock; /* protects the fields up to 'counters' */
	pthread_cond_t cond;  /* a response, a CONFIRM_LINK, a flow's end, the link group's */
	/* One locally started flow at a time (net/smc/smc_llc.c
	 * smc_llc_flow_initiate()): set for the whole request/response. */
	bool flow_busy;
	uint32_t flow_ticket;		 /* the running flow's */
	uint32_t last_ticket;		 /* the last one given to a flow (0 names none) */
	struct smcr_llc_slot *flow_slot; /* the running flow's, if run as events */
	struct smcr_llc_slot slots[SMCR_LLC_FLOW_SLOTS];
	unsigned int begin_waiters; /* threads waiting in smcr_llc_flow() for the flow */
	bool slot_refused;	    /* a start was told -EBUSY since a slot was given back */
	uint8_t wait_type;	    /* response type the running flow waits for, 0 none */
	bool resp_valid;
	struct llc_msg resp;
	bool confirm_req_valid;	    /* client: the server's CONFIRM_LINK arrived */
	struct llc_msg confirm_req; /* its content */
	/* answers owed (SMCR_LLC_OWED), oldest first, encoded */
	struct llc_owed {
		uint8_t b[LLC_MSG_LEN];
		int len;
		int slot; /* the link the request came over */
	} owed[SMCR_LLC_OWED];
	unsigned int owed_n;

	/* counters: atomics, read by tests and statistics without a lock */
	atomic_uint_least64_t test_link_answered, test_link_sent;
	atomic_uint_least64_t rkey_confirmed, rkey_deleted; /* peer requests answered */
	atomic_uint_least64_t rkey_requests; /* CONFIRM_RKEY and DELETE_RKEY requests we sent */
	atomic_uint_least64_t answers_owed;  /* answers that waited for send queue room */
	atomic_uint_least64_t answers_lost;  /* ... and found SMCR_LLC_OWED waiting already */

	/* TEST_LINK keepalive: each link's smcr_link.tl_sent_ms */
	atomic_bool test_now;	 /* a peer looks dead: TEST_LINK on each link at the next tick */
	atomic_uint barrier_gen; /* the last smcr_llc_barrier() generation */
};

void smcr_llc_init(struct smcr_llc *llc);
void smcr_llc_fini(struct smcr_llc *llc);

/* The slot of the link smcr_llc_send() and the flows send on now (Linux:
 * smc_llc_usable_link()): a message that names it (CONFIRM_RKEY's first
 * entry) is built for it. */
int smcr_llc_link_slot(struct lgr *lgr);

/* Send one LLC message; -EAGAIN if the send queue is full. */
int smcr_llc_send(struct lgr *lgr, const struct llc_msg *m);
/* The same on link @lnk (a CONFIRM_LINK goes on the link it confirms). */
int smcr_llc_send_on(struct lgr *lgr, struct smcr_link *lnk, const struct llc_msg *m);
/* The same on a DEAD link group: its last words (DELETE_LINK), on @lnk,
 * the link the LLC went over while it lived (smcr_llc_link_slot()). */
int smcr_llc_send_force(struct lgr *lgr, struct smcr_link *lnk, const struct llc_msg *m);

/*
 * smcr_llc_flow() - send @req and wait for its response (SMCR_LLC_WAIT_MS),
 * after waiting for a running flow to end (SMCR_FLOW_WAIT_MS).
 * -ETIMEDOUT, -ECONNABORTED if the link group dies meanwhile.
 */
int smcr_llc_flow(struct lgr *lgr, const struct llc_msg *req, struct llc_msg *resp);

/* The same on link @lnk (NULL: the link LLC messages go on). */
int smcr_llc_flow_on(struct lgr *lgr, struct smcr_link *lnk, const struct llc_msg *req,
		     struct llc_msg *resp);
/*
 * smcr_llc_flow_own() - own the link group's flow without a request of
 * ours: the peer's ADD_LINK runs, and our own flows (CONFIRM_RKEY) wait
 * for its end, as Linux's remote flow holds off its local ones
 * (net/smc/smc_llc.c smc_llc_flow_start()). Waits for a running flow
 * SMCR_FLOW_WAIT_MS at most; the next CONFIRM_LINK request is awaited
 * anew (smcr_llc_wait_confirm_link()). smcr_llc_flow_disown() ends it.
 */
int smcr_llc_flow_own(struct lgr *lgr);
void smcr_llc_flow_disown(struct lgr *lgr);

/*
 * The same flow run as events, for a handshake that must not wait on its
 * thread (a listener's worker, the asynchronous client):
 * smcr_llc_flow_start() - send @req (one of LLC_MSG_LEN bytes) when the
 * flow is free: now, or when the flows before it got their answers, which
 * start the next one as they arrive (smcr_llc_rx()) without waiting for
 * their owners. 0 (*@ticket names the flow), -EBUSY when
 * SMCR_LLC_FLOW_SLOTS flows are started or waiting already (ask again after
 * the next handshake event, smcr_ctx_hs_event()), or -EMSGSIZE.
 * smcr_llc_flow_result() - the flow's response into @resp: 0, -EAGAIN
 * while it may still come, -ETIMEDOUT at @due_ms or SMCR_LLC_WAIT_MS
 * after the request left, -ECONNABORTED if the link group died, or the
 * error sending the request. Anything but -EAGAIN ends the flow.
 * smcr_llc_flow_settled() - smcr_llc_flow_result() would find the answer or
 * the link group's death (a hint: the listener's accept thread asks).
 * smcr_llc_flow_abandon() - end the flow without its answer (its owner is
 * going away). A response, the end of any flow and the link group's death
 * are each a handshake event of the context.
 */
int smcr_llc_flow_start(struct lgr *lgr, const struct llc_msg *req, uint32_t *ticket);
int smcr_llc_flow_result(struct lgr *lgr, uint32_t ticket, long due_ms, struct llc_msg *resp);
/* smcr_llc_flow_due() - by when smcr_llc_flow_result() with @due_ms ends
 * the flow by itself if no answer comes: @due_ms, or SMCR_LLC_WAIT_MS after
 * its request left if that is sooner. A parked owner looks again then. */
long smcr_llc_flow_due(struct lgr *lgr, uint32_t ticket, long due_ms);
bool smcr_llc_flow_settled(struct lgr *lgr, uint32_t ticket);
void smcr_llc_flow_abandon(struct lgr *lgr, uint32_t ticket);

/* Client: wait for the server's CONFIRM_LINK request, at most @timeout_ms
 * (0: only look); -ETIMEDOUT, or -ECONNABORTED if the link group died. */
int smcr_llc_wait_confirm_link(struct lgr *lgr, int timeout_ms, struct llc_msg *req);

/*
 * smcr_llc_barrier() - send a TEST_LINK tagged with a new generation and
 * return it (never 0); its answer calls lgr_conn_ops.barrier with it. A peer
 * answers an LLC request only after it has handled every CDC that came
 * before it on the link, and what those CDCs made it send was posted before
 * the answer (Linux handles CDCs in its receive tasklet, sending at once,
 * net/smc/smc_cdc.c smc_cdc_msg_recv_action(), and LLC requests later in its
 * event work, smc_llc.c smc_llc_event_handler(), which echoes TEST_LINK):
 * when the answer arrives, so has all that. Not waited for; one that could
 * not be sent is an answer that never comes.
 */
uint32_t smcr_llc_barrier(struct lgr *lgr);

/* A received LLC message (progress thread). Malformed ones are dropped.
 * A request's answer that finds the send queue full is kept and sent when
 * room comes back: a peer's TEST_LINK or CONFIRM_RKEY left unanswered ends
 * its side of the link group or its connection. */
void smcr_llc_rx(struct lgr *lgr, int slot, const uint8_t *buf, uint32_t len);

/* Send @m, the answer to a peer's request that came over the link in
 * @slot, on that link (as Linux answers on qentry->link: a TEST_LINK
 * answered on another link would leave the peer's test of this one
 * unanswered), behind the answers still owed (kept if the send queue is
 * full). */
void smcr_llc_answer(struct lgr *lgr, int slot, const struct llc_msg *m);

/* ---- adding a link (smcr_llc_link.c) ---- */

/* Server: add a second link to @lgr, just up, if both ends allow one
 * (lgr->max_links); runs on a thread of its own. */
void smcr_llc_add_link_start(struct lgr *lgr);
/*
 * Progress thread tick: a link group with fewer links than both ends
 * allow (one failed, or its path had no port when it was up) tries to add
 * one again every SMCR_READD_MS, so that a path that comes back is used
 * again without new connections asking: the server adds one, the client
 * asks the server for one (REQ_ADD_LINK), which a Linux server otherwise
 * does only at a port's up event (net/smc/smc_core.c smcr_port_add()).
 */
#define SMCR_READD_MS 2000
void smcr_llc_add_link_tick(struct lgr *lgr, long now_ms);
/* Server: the client's REQ_ADD_LINK; true if an add-link started (or
 * runs), which answers it. */
bool smcr_llc_req_add_link_rx(struct lgr *lgr);
/* Client: the server's ADD_LINK request @m, over the link in @slot
 * (progress thread): taken on a thread of its own, or rejected at once. */
void smcr_llc_add_link_rx(struct lgr *lgr, int slot, struct llc_msg *m);

/* Send queue room came back (the link's sq_room): send the answers owed,
 * oldest first, while there is room. */
void smcr_llc_send_owed(struct lgr *lgr);

/* Progress thread tick: TEST_LINK when idle or asked, on the link LLC
 * messages go on; that link fails when one goes unanswered. */
void smcr_llc_tick(struct lgr *lgr, long now_ms);

/* Wake every LLC waiter: the link group died. */
void smcr_llc_wake_all(struct lgr *lgr);

#endif
