/* SPDX-License-Identifier: MIT */
/*
 * A link group (net/smc/smc_core.h struct smc_link_group): its links to
 * one peer (struct smcr_link, smcr_link.h; up to SMCR_LINKS_MAX), its buffer
 * pools, its connection table, and the progress thread that runs the
 * completions when nobody else does and runs the timers. The links' work
 * requests are smcr_wr.h's, the LLC flows smcr_llc.h's; the link group
 * registers the handlers its links hand their completions to, and the
 * connections plug in through struct lgr_conn_ops, so this file never
 * sees their insides.
 *
 * Life cycle: LGR_INIT (created, handshaking) -> LGR_ACTIVE (lgr_activate:
 * CONFIRM_LINK done; reusable once published) -> LGR_DEAD (lgr_terminate,
 * from any state; final). Only this file changes the state.
 */
#ifndef USMC_LGR_H
#define USMC_LGR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "bufpool.h"
#include "lgr_rtoken.h"
#include "smcr_ctx.h"
#include "smcr_dev.h"
#include "smcr_eng.h"
#include "smcr_link.h"
#include "smcr_llc.h"
#include "smcr_wr.h"

#define SMCR_MAX_CONNS 255 /* SMC_CONN_PER_LGR_MAX */
#define LGR_FIRST_LINK 0   /* the link a first contact creates (Linux: SMC_SINGLE_LINK) */

_Static_assert(LGR_RTOKEN_LINKS == SMCR_LINKS_MAX, "a peer RMB has a column per link slot");

enum lgr_state { LGR_INIT, LGR_ACTIVE, LGR_DEAD };

struct smcr_conn;
struct bufpool;

/*
 * What a link group calls on its connections (the way rdma-core's providers
 * hang off verbs_context_ops): connections are defined above this layer.
 * All but get/put run in whichever thread holds the engine token (smcr_eng.h).
 */
struct lgr_conn_ops {
	void (*get)(struct smcr_conn *sc); /* take a reference */
	void (*put)(struct smcr_conn *sc); /* drop one */
	/* A CDC message arrived (not yet decoded). */
	void (*cdc_rx)(struct lgr *lgr, const uint8_t *buf, uint32_t len);
	/* A CDC send of @p->conn completed (the reference it held is the callee's). */
	void (*tx_done)(struct lgr *lgr, const struct smcr_tx_pend *p);
	/* Send queue room came back: retry connections that found none. */
	void (*kick_pending)(struct lgr *lgr);
	/* The link group died: fail @sc with @err; true if nobody but the
	 * link group holds it any more (closed by the user). */
	bool (*fail)(struct smcr_conn *sc, int err);
	/* The answer to smcr_llc_barrier()'s generation @gen arrived. */
	void (*barrier)(struct lgr *lgr, uint32_t gen);
	/* The TCP socket of connection @token hung up. */
	void (*tcp_hup)(struct lgr *lgr, uint32_t token);
	/* Timer tick: connections whose TCP hung up without a close, closed
	 * ones whose peer did not close in time, held EOFs past their bound. */
	void (*tick)(struct lgr *lgr);
	/* The link in slot @from failed: if @sc sends on it, move it to the
	 * link in slot @to and send again what the peer has not confirmed;
	 * true if it moved. */
	bool (*switch_link)(struct smcr_conn *sc, int from, int to);
};

/* Per link group settings, from the context's options. */
struct lgr_config {
	bool busy_poll;	   /* USMC_OPT_BUSY_POLL */
	bool spin;	   /* USMC_OPT_SPIN */
	long testlink_ms;  /* USMC_OPT_TESTLINK_MS, 0: no keepalive */
	long idle_ms;	   /* USMC_OPT_LGR_IDLE_MS */
	uint32_t max_bufs; /* USMC_OPT_MAX_BUFS: buffers per pool; 0 = 255 */
	int max_lgrs;	   /* USMC_OPT_MAX_LGRS: per context, in any state */
	int max_per_peer;  /* USMC_OPT_MAX_LGRS_PER_PEER: per peer IPv4 address */
};

/* One connection table entry: the token is ours, the slot its low byte. */
struct lgr_slot {
	struct smcr_conn *conn;
	uint32_t token;
};

struct lgr {
	struct smcr_ctx *sctx; /* the owning context */
	const struct lgr_conn_ops *ops;
	struct lgr_config cfg;
	bool is_server;
	uint32_t id;
	_Atomic int state; /* enum lgr_state; changed only in lgr.c */

	struct lgr *next;     /* sctx->lgrs; sctx->lock protects it */
	bool reclaimed;	      /* unlinked idle for a first contact (sctx->lock): lgr_find.c */
	struct lgr *all_next; /* sctx->all; sctx->lock protects it */
	struct eng_stats st;  /* data-path counters (eng_stats.h), lock-free */
	/*
	 * References: each connection from smcr_conn_new() to its last put,
	 * each finder from lgr_claim()/lgr_find_wait() to lgr_put(). Taken
	 * from 0 only under sctx->lock or before publication; a published link group
	 * is freed by its progress thread only at 0, after unlinking it under
	 * sctx->lock, so no connection outlives its link group.
	 */
	atomic_int refs;

	/* The peer: written while LGR_INIT by the one handshake that owns the
	 * link group, read-only once it is published. */
	uint8_t peer_id[SMCR_SYSTEM_ID_LEN];
	struct in_addr peer_addr; /* the TCP peer that created it: only it may reuse it */
	uint8_t max_conns;
	uint8_t max_links; /* negotiated: USMC_OPT_MAX_LINKS and the peer's CLC */

	/* Its links, each with its QP's two ends: the first created by
	 * lgr_create(), the others by lgr_link_new() and freed by the progress
	 * thread once dropped (lgr_link.c); lgr_free() frees what is left.
	 * The one a connection sends on: smcr_conn.lnk_slot. */
	struct smcr_link lnk[SMCR_LINKS_MAX];
	struct bufpool *rmbs, *sndbufs; /* registered on each link's PD; lock-free themselves */

	pthread_mutex_t lock;			   /* protects conns, nconns, idle_since_ms */
	struct lgr_slot conns[SMCR_MAX_CONNS + 1]; /* by token slot; 0 unused */
	int nconns;
	long idle_since_ms; /* when nconns dropped to 0 */

	struct smcr_llc llc; /* its own locks */
	/* the peer's RMBs, a column per link slot (lgr_rtoken.h): rows from
	 * its CONFIRM_RKEY (smcr_llc.c) and its CLC ACCEPT/CONFIRM
	 * (smcr_conn_set_peer()), gone with its DELETE_RKEY; its own lock */
	struct lgr_rtokens rtok;
	struct smcr_eng eng; /* who runs its links' completions (smcr_eng.h); its own lock */

	/* links beyond the first (lgr_link.c): the one thread that adds a
	 * link (joined by lgr_free()), and the slots of dropped links the
	 * progress thread is to free */
	pthread_t al_thread;
	atomic_bool al_started; /* al_thread is to be joined */
	atomic_bool al_running; /* ... and has not ended yet */
	long al_next_ms;	/* the next try to add one: the progress thread's only */
	/* server: the client rejected our last offer, on our port of GID
	 * al_refused_gid (written before al_refused is set): the same offer is
	 * not made again until it asks (REQ_ADD_LINK) or a link fails */
	atomic_bool al_refused;
	uint8_t al_refused_gid[SMCR_GID_LEN];
	atomic_uint reap_slots;
	/* links made beyond the first (lgr_link_new(), before the slot goes
	 * live): an RMB whose rkeys the peer was last told at another count
	 * may lack one for a link (bufpool_buf.rkey_links, smcr_clc.c) */
	atomic_uint links_made;

	/* progress thread (lgr_progress.c) */
	pthread_t thread;
	bool thread_started; /* written by lgr_start() and lgr_stop_thread() */
	atomic_bool stop;
	int stop_fd; /* eventfd: ask the progress thread to stop or to look at the token */
	int ep;	     /* epoll: completion channels, async events, stop_fd, TCP sockets */
	/* the links whose channel and async events ep holds, and whether it
	 * watches each channel: the progress thread's only */
	struct smcr_link *ep_links[SMCR_LINKS_MAX];
	bool ch_watched[SMCR_LINKS_MAX];
	atomic_int orphans; /* closed by their user, waiting for the peer (smcr_close.c) */
	atomic_bool tcp_eof_seen;
	atomic_int tcp_unwatched; /* established, TCP socket not yet watched (smcr_close.c) */
	atomic_int eof_holds;	  /* connections whose held EOF has its bound armed (smcr_rx.c) */
	atomic_int failover_watches; /* connections watched after a failover (smcr_rx.c) */
	/* the last barrier behind TCP hang-ups and when it was sent: the
	 * progress thread's only (smcr_conn_lgr.c sc_tick()) */
	uint32_t hup_barrier;
	long hup_barrier_ms;
};

/*
 * lgr_conn_link() - the link a connection of @lgr sends on and waits for
 * (Linux: conn->lnk, which smcr_lgr_conn_assign_link() picks among the
 * active links). New connections all take the first (no spreading
 * yet); a failover moves a connection to another (its lnk_slot).
 */
static inline struct smcr_link *lgr_conn_link(struct lgr *lgr)
{
	return &lgr->lnk[LGR_FIRST_LINK];
}

/* The peer's last word on any link of @lgr: the latest of its links'
 * last receives (an answer may come over any of them). */
static inline long lgr_last_rx_ms(struct lgr *lgr)
{
	long last = 0;

	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		long t = atomic_load(&lgr->lnk[i].last_rx_ms);

		if (atomic_load(&lgr->lnk[i].state) != SMCR_LNK_UNUSED && t > last)
			last = t;
	}
	return last;
}

/*
 * lgr_rmb_rkey() - the rkey of our RMB @buf on link slot @slot: what the
 * peer writes it with over that link (our CONFIRM_RKEY's entries). The
 * pools' registration slots are the link slots (lgr_link.c
 * bufpool_reg_add()); 0 while @slot's link has no registration yet.
 */
static inline uint32_t lgr_rmb_rkey(const struct lgr *lgr, const struct bufpool_buf *buf, int slot)
{
	(void)lgr;
	return bufpool_buf_rkey(buf, slot);
}

/* ---- life cycle ---- */

/* A new LGR_INIT link group on @dev with its link's QP in INIT, receives posted. */
int lgr_create(struct smcr_ctx *sctx, const struct lgr_conn_ops *ops, const struct lgr_config *cfg,
	       bool is_server, const struct smcr_dev *dev, struct lgr **out);
/* The peer's identity, from its CLC message and its TCP address (LGR_INIT
 * only); its MAC is the first link's. */
void lgr_set_peer(struct lgr *lgr, const uint8_t peer_id[SMCR_SYSTEM_ID_LEN],
		  const uint8_t peer_mac[SMCR_MAC_LEN], struct in_addr peer_addr);
/* Start the progress thread. */
int lgr_start(struct lgr *lgr);
/* CONFIRM_LINK done: LGR_INIT -> LGR_ACTIVE, its link ACTIVE with number
 * @link_num; -ECONNABORTED if it died. */
int lgr_activate(struct lgr *lgr, uint8_t link_num, uint8_t max_conns);
/* A reference on @lgr: held, it is never freed. */
void lgr_get(struct lgr *lgr);
void lgr_put(struct lgr *lgr);

/* Mark dead and fail every connection (from any thread). */
void lgr_terminate(struct lgr *lgr, int err, bool send_delete);
/* Terminate and free a link group no one else can reach. */
void lgr_free(struct lgr *lgr);
/* Free every link group of @sctx (context teardown). */
void lgr_destroy_all(struct smcr_ctx *sctx);

/* ---- links beyond the first (lgr_link.c) ---- */

/*
 * lgr_link_new() - a new link in a free slot of @lgr on @dev, numbered
 * @link_num: its verbs objects, its receives posted, the link group's
 * buffers registered on its PD, its completions run by the engine; its QP
 * in INIT, ACTIVATING. -ENOSPC without a free slot.
 */
int lgr_link_new(struct lgr *lgr, const struct smcr_dev *dev, uint8_t link_num,
		 struct smcr_link **out);
/* Take @lnk down (not the first link's slot while it lives: any other):
 * its QP to ERR now, its objects freed by the progress thread. */
void lgr_link_drop(struct lgr *lgr, struct smcr_link *lnk);
/* The link number for a new link: one no link of @lgr has (Linux:
 * smc_next_link_id()). */
uint8_t lgr_next_link_num(struct lgr *lgr);
/* The link of @lgr numbered @link_num (ACTIVATING or ACTIVE), or NULL. */
struct smcr_link *lgr_link_by_num(struct lgr *lgr, uint8_t link_num);
/* How many of @lgr's links are ACTIVE; ACTIVE or ACTIVATING. */
int lgr_links_active(struct lgr *lgr);
int lgr_links_live(struct lgr *lgr);
/*
 * lgr_link_assign() - the slot of the link a new connection of @lgr sends
 * on: its ACTIVE links in turn, by the count of connections (Linux's
 * smcr_lgr_conn_assign_link() alternates the same way); the first link
 * while none is ACTIVE (a first contact's).
 */
int lgr_link_assign(struct lgr *lgr);
/* The slot of @lgr's ACTIVE link whose peer QP is @peer_qpn with @peer_gid
 * (a client's reuse: the link the server's ACCEPT names), or -ENOENT. */
int lgr_link_of_peer(struct lgr *lgr, uint32_t peer_qpn, const uint8_t *peer_gid);
/* @lnk's slot in its link group. */
static inline int lgr_link_slot(const struct lgr *lgr, const struct smcr_link *lnk)
{
	return (int)(lnk - lgr->lnk);
}

/* ---- which link group a connection joins (lgr_find.c) ---- */

/* Make an active link group findable for reuse (sctx->lgrs). */
void lgr_publish(struct lgr *lgr);
/* What a reusable link group must match. */
struct lgr_key {
	enum smcr_role role;
	const uint8_t *peer_id;	  /* SMCR_SYSTEM_ID_LEN bytes */
	const uint8_t *peer_gid;  /* SMCR_GID_LEN bytes */
	struct in_addr peer_addr; /* the TCP peer: a link group is bound to it */
	uint32_t peer_qpn;
	bool match_qpn;
};

/* A first contact in progress (lgr_claim() .. lgr_unclaim()), on the
 * claimer's stack, in sctx->pending. */
struct lgr_pending {
	enum smcr_role role;
	uint8_t peer_id[SMCR_SYSTEM_ID_LEN];
	uint8_t peer_gid[SMCR_GID_LEN];
	struct in_addr peer_addr;
	struct lgr_pending *next;
};

/*
 * lgr_claim() - the link group a server handshake with @k's peer uses: an
 * active one with room (*@reuse, with a reference), or, after waiting until
 * @deadline_ms for a first contact with the same peer that is in progress,
 * none (*@reuse NULL): then @p is registered and the caller runs the first
 * contact and calls lgr_unclaim(). -EUSERS when the caps of @cfg leave no
 * room for another link group even after reclaiming idle ones (lgr_cap.h;
 * a reclaimed one is unlinked at once and freed by its progress thread),
 * -ETIMEDOUT when the wait ran out.
 * lgr_reserve() - the same without looking for a link group to reuse (a
 * client told "first contact" by its server).
 */
int lgr_claim(struct smcr_ctx *sctx, const struct lgr_key *k, const struct lgr_config *cfg,
	      long deadline_ms, struct lgr_pending *p, struct lgr **reuse);
int lgr_reserve(struct smcr_ctx *sctx, const struct lgr_key *k, const struct lgr_config *cfg,
		struct lgr_pending *p);
void lgr_unclaim(struct smcr_ctx *sctx, struct lgr_pending *p);

/* The first link of @lgr, ACTIVATING on @dev and reporting to @lgr (no
 * verbs yet); tests drive a link of fakes through it. */
void lgr_link_init(struct lgr *lgr, const struct smcr_dev *dev);

/*
 * lgr_find_wait() - an active link group matching @k with a reference for
 * the caller; NULL if none. While a first contact with @k's peer is in
 * progress (lgr_reserve(): it may still publish the one wanted) it waits
 * for it, until @deadline_ms at the latest; with none in progress it
 * returns at once. @deadline_ms 0: never wait (an asynchronous handshake
 * asks again later). *@pending (if not NULL): NULL was returned while such
 * a first contact is still in progress. The caller lgr_put()s the link
 * group once its connection holds its own.
 */
struct lgr *lgr_find_wait(struct smcr_ctx *sctx, const struct lgr_key *k, long deadline_ms,
			  bool *pending);
/*
 * lgr_hold_peer() - a client handshake with @peer is about to wait for its
 * ACCEPT: the server may first run a CONFIRM_RKEY flow on any of our
 * client link groups to it, so their completions must run at once
 * (smcr_eng_hold()) until lgr_unhold_peer(). Fills @held (with references)
 * and returns how many.
 */
int lgr_hold_peer(struct smcr_ctx *sctx, struct in_addr peer, struct lgr **held, int max);
void lgr_unhold_peer(struct lgr **held, int n);

/* ---- connection table ---- */

/* Add @sc (takes a reference); its new alert token in *@token. -ENOSPC if full. */
int lgr_conn_add(struct lgr *lgr, struct smcr_conn *sc, uint32_t *token);
/* Remove connection @token (drops the table's reference); no-op if gone. */
void lgr_conn_del(struct lgr *lgr, uint32_t token);
/* The connection of @token with a reference for the caller, or NULL. */
struct smcr_conn *lgr_conn_get(struct lgr *lgr, uint32_t token);
/* A snapshot of the connections, each with a reference the caller drops. */
int lgr_conns_get(struct lgr *lgr, struct smcr_conn *list[SMCR_MAX_CONNS]);

/* ---- statistics (read-only; lgr_info.c) ---- */

/* The engine counters of @lgr added into @out. */
void lgr_engine_stats(const struct lgr *lgr, struct usmc_engine_stats *out);

/*
 * What usmc-stat shows of one link of a link group. Of an ACTIVATING link
 * only the slot, state and local port (device, port, local GID): its
 * handshake (a first contact's, ADD_LINK's) still writes the rest, so it
 * must have written it before the link leaves ACTIVATING (smcr_link.h).
 */
struct lgr_link_info {
	int slot;	  /* its index in lgr.lnk[] */
	uint8_t link_num; /* Linux: link_id */
	int state;	  /* enum smcr_link_state, never SMCR_LNK_UNUSED */
	char dev_name[64];
	uint8_t port;
	uint8_t local_gid[SMCR_GID_LEN], peer_gid[SMCR_GID_LEN];
	uint32_t qp_num, peer_qpn; /* 0 before the QP exists, or before the peer's is known */
	int sq_used;		   /* send queue entries in flight, of SMCR_MAX_SEND_WR */
};

/* What usmc-stat shows of one link group. */
struct lgr_info {
	uint32_t id;
	bool is_server;
	int state; /* enum lgr_state */
	uint8_t peer_id[SMCR_SYSTEM_ID_LEN];
	/* each slot of lgr.lnk[] that holds a link, in slot order */
	struct lgr_link_info links[SMCR_LINKS_MAX];
	int nlinks;
	int nconns, max_conns;
	struct bufpool_class_usage rmbs[SMC_BUF_CLASSES], sndbufs[SMC_BUF_CLASSES];
	uint64_t test_link_sent, test_link_answered, rkey_confirmed, rkey_deleted;
	struct usmc_engine_stats engine;
};

/*
 * lgr_info_main_link() - the link that stands for @g where one link is
 * shown (the link group's flat device, GIDs and QP numbers in usmc-stat's
 * JSON): its first ACTIVE link, else its first link; NULL if it has none.
 */
const struct lgr_link_info *lgr_info_main_link(const struct lgr_info *g);

/*
 * lgr_info_all() - a copy of up to @max published link groups of @sctx
 * (sctx->lgrs); returns how many there are (may exceed @max). Takes
 * sctx->lock, then each lgr.lock, its pools' grow locks and its links' send
 * queue locks in turn (the documented order); changes nothing.
 */
int lgr_info_all(struct smcr_ctx *sctx, struct lgr_info *out, int max);

/* ---- TCP sockets watched by the progress thread ---- */

/* Report a hang-up of @fd once (ops->tcp_hup with @token). */
int lgr_watch_tcp(struct lgr *lgr, uint32_t token, int fd);
void lgr_unwatch_tcp(struct lgr *lgr, int fd);

#endif
