/* SPDX-License-Identifier: MIT */
/*
 * A link (net/smc/smc_core.h struct smc_link): one RC QP to the peer on one
 * RoCE port, with the verbs objects it runs on (its own device context,
 * PD, a receive and a send CQ, one completion channel), its receive
 * buffers, its send queue and the peer's end of the QP. A link group
 * holds its links (lgr.h); this file creates a link's objects and changes
 * its QP's state, as net/smc/smc_ib.c; the work requests on it are
 * smcr_wr.h's, as net/smc/smc_wr.c.
 *
 * A link knows nothing above it: its owner registers one table of
 * handlers (struct smcr_link_handlers), and the work request layer hands
 * every completion to it, as Linux registers its receive handlers by
 * message type (net/smc/smc_wr.c smc_wr_rx_register_handler()).
 *
 * Life cycle (Linux's enum smc_link_state): SMCR_LNK_ACTIVATING
 * (smcr_link_init(): the handshake and CONFIRM_LINK run) ->
 * SMCR_LNK_ACTIVE (smcr_link_activate()) -> SMCR_LNK_INACTIVE
 * (smcr_link_deactivate(), from any state; final). Only this file changes
 * the state.
 */
#ifndef USMC_SMCR_LINK_H
#define USMC_SMCR_LINK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "eng_stats.h"
#include "smcr_dev.h"

#define SMCR_RX_WRS	 48   /* posted receives per link (Linux: SMC_WR_BUF_CNT * 3) */
#define SMCR_RX_BUF_LEN	 8192 /* v2 LLC may be this long (SMC_WR_BUF_V2_SIZE) */
#define SMCR_TX_CDC_WRS	 256  /* send queue entries data may use */
#define SMCR_TX_LLC_WRS	 16   /* reserved for LLC (responses must always go) */
#define SMCR_MAX_SEND_WR (SMCR_TX_CDC_WRS + SMCR_TX_LLC_WRS)
#define SMCR_MAX_INLINE	 64 /* a 44-byte CDC/LLC always goes inline */
/* Link slots of a link group (Linux: SMC_LINKS_PER_LGR_MAX): two
 * symmetric links and an asymmetric one. */
#define SMCR_LINKS_MAX 3

enum smcr_link_state {
	SMCR_LNK_UNUSED,     /* a slot of a link group that holds no link */
	SMCR_LNK_ACTIVATING, /* created: the handshake and CONFIRM_LINK run */
	SMCR_LNK_ACTIVE,     /* confirmed */
	SMCR_LNK_INACTIVE,   /* down: only a forced LLC post leaves (DELETE_LINK) */
};

/* One pending signaled send (completions arrive in posting order). */
struct smcr_tx_pend {
	/* a CDC's connection, which the sender knows how to read (it holds
	 * a reference); NULL for LLC */
	void *conn;
	uint16_t nwr;	  /* send queue entries it frees */
	uint64_t mark;	  /* CDC: bytes of the connection's stream covered */
	uint8_t lnk_slot; /* CDC: the link it went on (a failover moves its connection) */
	/* at its completion: the send failed (flushed with its QP), so the
	 * peer may not have what it covers */
	bool failed;
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

struct smcr_link;
struct usmc_logger;

/*
 * Where a link's completions go: its owner's one table. All run in
 * whichever thread polls the link's CQs (the engine token's holder,
 * smcr_eng.h).
 */
struct smcr_link_handlers {
	/* A message arrived: a CDC (its first byte says so) or an LLC. */
	void (*rx_cdc)(struct smcr_link *lnk, const uint8_t *buf, uint32_t len);
	void (*rx_llc)(struct smcr_link *lnk, const uint8_t *buf, uint32_t len);
	/* A send of @p->conn completed (the reference it held is the callee's). */
	void (*tx_done)(struct smcr_link *lnk, const struct smcr_tx_pend *p);
	/* Send queue room came back after a post found none. */
	void (*sq_room)(struct smcr_link *lnk);
	/* The link failed (@err); @orderly: it still works, so tell the peer. */
	void (*error)(struct smcr_link *lnk, int err, bool orderly);
};

/* What a link reports to, above it: set by smcr_link_init(), fixed. */
struct smcr_link_upper {
	const struct smcr_link_handlers *h;
	void *ctx;		 /* the handlers': the owning link group */
	struct usmc_logger *log; /* for messages; may be NULL */
	uint32_t lgr_id;	 /* for messages: the owning link group's id */
	struct eng_stats *st;	 /* the owning link group's data-path counters */
};

struct smcr_link {
	struct smcr_link_upper up;
	_Atomic int state; /* enum smcr_link_state; changed only in smcr_link.c */

	/* Our end and the peer's: written while ACTIVATING by the one
	 * handshake that owns the link, read-only once it is published. */
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
	/* our TEST_LINK on this link sent then, its answer awaited; 0 none.
	 * Each link is tested on its own, as Linux's llc_testlink_wrk: an
	 * idle link that fails silently is found before it carries data. The
	 * tick sets it, whoever runs the answer's completion clears it. */
	atomic_long tl_sent_ms;

	struct smcr_sq sq;	 /* its own lock */
	atomic_bool any_pending; /* a post found no room: sq_room is owed */
};

/* Ready to create: ACTIVATING on @dev, link number 1, a random PSN. */
void smcr_link_init(struct smcr_link *lnk, const struct smcr_dev *dev,
		    const struct smcr_link_upper *up);
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

/* ACTIVATING -> ACTIVE; false if it went down meanwhile. */
bool smcr_link_activate(struct smcr_link *lnk);
/* -> INACTIVE: sends but a forced LLC are refused from now on. Returns
 * the state it left: SMCR_LNK_INACTIVE if it was down already, so that of
 * several callers exactly one sees it go down; SMCR_LNK_UNUSED (and no
 * change) for a slot without a link. */
int smcr_link_deactivate(struct smcr_link *lnk);

/* Is async event @e about this link: its port, its QP, its CQs, its device? */
bool smcr_link_async_fatal(const struct smcr_link *lnk, const struct ibv_async_event *e);

#endif
