/* SPDX-License-Identifier: MIT */
/*
 * Work requests of a link group's one RC QP (net/smc/smc_wr.c): the
 * receive buffers every CDC and LLC message lands in, the send queue's
 * accounting with a ring of pending signaled sends, and the completion
 * queue drain that hands each completion to its owner.
 */
#ifndef USMC_SMCR_WR_H
#define USMC_SMCR_WR_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define SMCR_RX_WRS	    48	 /* posted receives per link (Linux: SMC_WR_BUF_CNT * 3) */
#define SMCR_RX_BUF_LEN	    8192 /* v2 LLC may be this long (SMC_WR_BUF_V2_SIZE) */
#define SMCR_TX_CDC_WRS	    256	 /* send queue entries data may use */
#define SMCR_TX_LLC_WRS	    16	 /* reserved for LLC (responses must always go) */
#define SMCR_MAX_SEND_WR    (SMCR_TX_CDC_WRS + SMCR_TX_LLC_WRS)
#define SMCR_MAX_INLINE	    64 /* a 44-byte CDC/LLC always goes inline */
#define SMCR_TX_WRS_PER_CDC 4  /* up to 3 RDMA WRITEs (split at wraps) + the SEND */

struct lgr;
struct smcr_conn;

/* One pending signaled send (completions arrive in posting order). */
struct smcr_tx_pend {
	struct smcr_conn *conn; /* a CDC's connection (holds a reference), NULL for LLC */
	uint16_t nwr;		/* send queue entries it frees */
	uint64_t mark;		/* CDC: bytes of the connection's stream covered */
};

/* Which share of the send queue a post may use. */
enum smcr_sq_class {
	SMCR_SQ_CDC,	   /* data: SMCR_TX_CDC_WRS, so LLC always finds room */
	SMCR_SQ_LLC,	   /* all SMCR_MAX_SEND_WR entries */
	SMCR_SQ_LLC_FORCE, /* LLC even on a DEAD link group (its DELETE_LINK) */
};

/* The send queue of one QP. */
struct smcr_sq {
	pthread_mutex_t lock; /* protects used, pend, head, tail and ibv_post_send */
	int used;	      /* entries posted and not completed */
	struct smcr_tx_pend pend[SMCR_MAX_SEND_WR];
	/* The pend ring's positions: 64-bit, so they never wrap (with 32-bit
	 * ones, 2^32 mod SMCR_MAX_SEND_WR != 0 mixed up slots at the wrap). */
	uint64_t head, tail;
	/* smcr_wr_stalled() only: the completion count (tail) it last saw
	 * change, and when, since the queue was last seen idle */
	bool watching; /* work was posted when it last looked */
	uint64_t watch_tail;
	long watch_since_ms;
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
 * no room for @n: lgr->any_pending is then set, so the completion that makes
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
