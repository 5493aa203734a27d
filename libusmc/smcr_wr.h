/* SPDX-License-Identifier: MIT */
/*
 * Work requests of a link's RC QP (net/smc/smc_wr.c): the receive buffers
 * every CDC and LLC message lands in, the send queue's accounting with a
 * ring of pending signaled sends, and the completion queue drain that
 * hands each completion to the handlers the link's owner registered
 * (smcr_link.h). Nothing above the link is known here.
 */
#ifndef USMC_SMCR_WR_H
#define USMC_SMCR_WR_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "smcr_link.h"

#define SMCR_TX_WRS_PER_CDC 4 /* up to 3 RDMA WRITEs (split at wraps) + the SEND */

/* Which share of the send queue a post may use. */
enum smcr_sq_class {
	SMCR_SQ_CDC,	   /* data: SMCR_TX_CDC_WRS, so LLC always finds room */
	SMCR_SQ_LLC,	   /* all SMCR_MAX_SEND_WR entries */
	SMCR_SQ_LLC_FORCE, /* LLC even on an inactive link (its DELETE_LINK) */
};

/* Record a posted send of @n entries / take the oldest one back; requires
 * sq->lock. */
void smcr_sq_push_locked(struct smcr_sq *sq, const struct smcr_tx_pend *p, int n);
bool smcr_sq_pop_locked(struct smcr_sq *sq, struct smcr_tx_pend *p);

/* Receive buffers: allocate, register and post all of them (QP in INIT). */
int smcr_wr_rx_setup(struct smcr_link *lnk);
void smcr_wr_rx_free(struct smcr_link *lnk);
/*
 * The link's buffer for an LLC message too long to go inline (a v2
 * ADD_LINK with its rkeys: net/smc/smc_wr.c's wr_tx_v2 buffer), of
 * SMCR_RX_BUF_LEN bytes, registered for local access with *@lkey. One
 * such message in flight per link: only the ADD_LINK flow sends one, and
 * a link group runs one flow at a time.
 */
uint8_t *smcr_wr_long_buf(struct smcr_link *lnk, uint32_t *lkey);

/*
 * smcr_wr_post_send() - post @n chained WRs (the last one signaled),
 * recording @p for its completion. -EAGAIN if @cls's share of the queue has
 * no room for @n: lnk->any_pending is then set, so the completion that makes
 * room calls the sq_room handler; -ECONNABORTED on an inactive link (unless
 * forced).
 */
int smcr_wr_post_send(struct smcr_link *lnk, struct ibv_send_wr *wr, int n,
		      const struct smcr_tx_pend *p, enum smcr_sq_class cls);

/* The oldest pending send, removed (its entries freed); false if none. */
bool smcr_wr_send_done(struct smcr_link *lnk, struct smcr_tx_pend *p);

/* Send queue entries posted and not yet completed (usmc-stat; takes the
 * queue's lock, a leaf). */
int smcr_wr_sq_used(struct smcr_link *lnk);

/*
 * A send queue with work posted and no completion for this long is stuck:
 * with infinite RNR retries (as Linux, there is no credit scheme for
 * SENDs) a peer that stops posting receives would hold it forever, and a
 * TEST_LINK queued behind the stuck sends could not tell.
 */
#define SMCR_SQ_STALL_MS 10000

/* True if the send queue, seen with work posted at each call, has
 * completed nothing for SMCR_SQ_STALL_MS (the progress thread's tick). */
bool smcr_wr_stalled(struct smcr_link *lnk, long now_ms);

/*
 * smcr_wr_poll() - one batch from each CQ (receive, send): received
 * messages go to the rx_cdc or rx_llc handler, send completions to
 * tx_done, then sq_room if a post waits for room. Returns how many
 * completions it handled. Only the holder of the engine token that runs
 * the link calls it (smcr_eng.h), or its owner at teardown.
 * smcr_wr_drain_cq() - the same until both CQs are empty.
 */
int smcr_wr_poll(struct smcr_link *lnk);
int smcr_wr_drain_cq(struct smcr_link *lnk);

#endif
