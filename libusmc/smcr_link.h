/* SPDX-License-Identifier: MIT */
/*
 * A link (net/smc/smc_core.h struct smc_link): one RC QP to the peer on one
 * RoCE port, with the verbs objects it runs on (its own device context,
 * PD, a receive and a send CQ, one completion channel), its receive
 * buffers, its send queue and the peer's end of the QP. A link group
 * holds its links (lgr.h); this file creates a link's objects and changes
 * its QP's state, as net/smc/smc_ib.c; the work requests on it are
 * smcr_wr.h's, as net/smc/smc_wr.c.
 */
#ifndef USMC_SMCR_LINK_H
#define USMC_SMCR_LINK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "smcr_dev.h"

#define SMCR_RX_WRS	 48   /* posted receives per link (Linux: SMC_WR_BUF_CNT * 3) */
#define SMCR_RX_BUF_LEN	 8192 /* v2 LLC may be this long (SMC_WR_BUF_V2_SIZE) */
#define SMCR_TX_CDC_WRS	 256  /* send queue entries data may use */
#define SMCR_TX_LLC_WRS	 16   /* reserved for LLC (responses must always go) */
#define SMCR_MAX_SEND_WR (SMCR_TX_CDC_WRS + SMCR_TX_LLC_WRS)
#define SMCR_MAX_INLINE	 64 /* a 44-byte CDC/LLC always goes inline */

struct smcr_conn;

/* One pending signaled send (completions arrive in posting order). */
struct smcr_tx_pend {
	struct smcr_conn *conn; /* a CDC's connection (holds a reference), NULL for LLC */
	uint16_t nwr;		/* send queue entries it frees */
	uint64_t mark;		/* CDC: bytes of the connection's stream covered */
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

struct smcr_link {
	/* Our end and the peer's: written while its link group is LGR_INIT
	 * by the one handshake that owns it, read-only once it is published. */
	struct smcr_dev dev;
	uint8_t link_num; /* Linux: link_id */
	uint32_t psn;	  /* our first send PSN */
	uint8_t peer_gid[SMCR_GID_LEN];
	uint8_t peer_mac[SMCR_MAC_LEN];
	uint32_t peer_qpn;

	/* verbs objects: smcr_link_create() .. smcr_link_free() */
	struct ibv_context *ib;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch; /* both CQs' events */
	struct ibv_cq *rcq, *scq;    /* receives; sends (armed only when a wait needs them) */
	struct ibv_qp *qp;
	uint32_t max_inline; /* the QP's max_inline_data: smaller WRITEs go inline */

	/* receives: smcr_wr_rx_setup() .. smcr_wr_rx_free() */
	uint8_t *rx_bufs;
	struct ibv_mr *rx_mr;
	atomic_long last_rx_ms; /* the last receive: whoever polls writes, the timers read */

	struct smcr_sq sq;	 /* its own lock */
	atomic_bool any_pending; /* a post found no room: a kick is owed */
};

/* Ready to create: on @dev, link number 1, a random PSN. */
void smcr_link_init(struct smcr_link *lnk, const struct smcr_dev *dev);
/* Open the device, make the PD, the channel and both CQs, and the QP in
 * INIT. What was made before a failure is left for smcr_link_qp_destroy()
 * and smcr_link_free(). */
int smcr_link_create(struct smcr_link *lnk);
/* QP to RTR (receives already posted) toward the peer's @peer_qpn and
 * @peer_gid, which the link keeps; then to RTS. */
int smcr_link_qp_rtr(struct smcr_link *lnk, uint32_t peer_qpn, uint32_t peer_psn,
		     const uint8_t peer_gid[SMCR_GID_LEN], enum ibv_mtu mtu);
int smcr_link_qp_rts(struct smcr_link *lnk);
/* QP to ERR: what is posted flushes (no-op without a QP). */
void smcr_link_qp_error(struct smcr_link *lnk);
/* Destroy the QP: the peer can no longer reach memory registered on the
 * link's PD. The rest goes with smcr_link_free(). */
void smcr_link_qp_destroy(struct smcr_link *lnk);
/* The CQs, the channel, the PD and the device (receives freed before). */
void smcr_link_free(struct smcr_link *lnk);

/* Is async event @e about this link: its port, its QP, its CQs, its device? */
bool smcr_link_async_fatal(const struct smcr_link *lnk, const struct ibv_async_event *e);

#endif
