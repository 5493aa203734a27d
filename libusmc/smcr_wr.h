/* SPDX-License-Identifier: MIT */
/*
 * Work requests of a link's RC QP (net/smc/smc_wr.c): the receive buffers
 * every CDC and LLC message lands in, the send queue's accounting with a
 * ring of pending signaled sends, and the completion queue drain that
 * hands each completion to its owner. The link itself is smcr_link.h's.
 */
#ifndef USMC_SMCR_WR_H
#define USMC_SMCR_WR_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "smcr_link.h"

#define SMCR_TX_WRS_PER_CDC 4 /* up to 3 RDMA WRITEs (split at wraps) + the SEND */

struct lgr;

/* Which share of the send queue a post may use. */
enum smcr_sq_class {
	SMCR_SQ_CDC,	   /* data: SMCR_TX_CDC_WRS, so LLC always finds room */
	SMCR_SQ_LLC,	   /* all SMCR_MAX_SEND_WR entries */
	SMCR_SQ_LLC_FORCE, /* LLC even on a DEAD link group (its DELETE_LINK) */
};

/* Record a posted send of @n entries / take the oldest one back; requires
 * sq->lock. */
void smcr_sq_push_locked(struct smcr_sq *sq, const struct smcr_tx_pend *p, int n);
bool smcr_sq_pop_locked(struct smcr_sq *sq, struct smcr_tx_pend *p);

/* Receive buffers: allocate, register and post all of them (QP in INIT). */
int smcr_wr_rx_setup(struct lgr *lgr);
void smcr_wr_rx_free(struct lgr *lgr);

/*
 * smcr_wr_post_send() - post @n chained WRs (the last one signaled),
 * recording @p for its completion. -EAGAIN if @cls's share of the queue has
 * no room for @n: the link's any_pending is then set, so the completion that makes
 * room runs ops->kick_pending(); -ECONNABORTED on a DEAD link group (unless
 * forced).
 */
int smcr_wr_post_send(struct lgr *lgr, struct ibv_send_wr *wr, int n, const struct smcr_tx_pend *p,
		      enum smcr_sq_class cls);

/* The oldest pending send, removed (its entries freed); false if none. */
bool smcr_wr_send_done(struct lgr *lgr, struct smcr_tx_pend *p);

/*
 * A send queue with work posted and no completion for this long is stuck:
 * with infinite RNR retries (as Linux, there is no credit scheme for
 * SENDs) a peer that stops posting receives would hold it forever, and a
 * TEST_LINK queued behind the stuck sends could not tell.
 */
#define SMCR_SQ_STALL_MS 10000

/* True if the send queue, seen with work posted at each call, has
 * completed nothing for SMCR_SQ_STALL_MS (the progress thread's tick). */
bool smcr_wr_stalled(struct lgr *lgr, long now_ms);

/*
 * smcr_wr_poll() - one batch from each CQ (receive, send): received
 * messages go to the CDC or LLC handler, send completions to their
 * connection. Returns how many completions it handled. Only the holder of
 * the link group's engine token calls it (smcr_eng.h), or lgr_free().
 * smcr_wr_drain_cq() - the same until both CQs are empty.
 */
int smcr_wr_poll(struct lgr *lgr);
int smcr_wr_drain_cq(struct lgr *lgr);

#endif
