// SPDX-License-Identifier: MIT
/*
 * Link groups (lgr.h), as net/smc/smc_core.c: their links set up and torn
 * down (smcr_link.h, smcr_wr.h) with the handlers their completions go to,
 * the progress thread that sleeps on the completion channel and runs the
 * timers, the connection table, and the life cycle from creation to
 * termination and freeing. Which one a new connection joins (reuse, first
 * contacts) is lgr_find.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "bufpool.h"
#include "clock.h"
#include "lgr.h"
#include "lgr_int.h"
#include "log.h"
#include "thread_name.h"

/* Link group ids step by SMC_LGR_NUM_INCR (net/smc/smc_core.h): the low
 * byte numbers the links, link_uid = id + link number. */
#define LGR_ID_STEP 256
/* An alert token is a generation above the table slot it names: a stale
 * token of a reused slot does not find the new connection. */
#define LGR_TOKEN_SLOT_BITS 8
#define LGR_TOKEN_SLOT_MASK ((1u << LGR_TOKEN_SLOT_BITS) - 1)
#define LGR_TOKEN_GEN_MASK  ((1u << (32 - LGR_TOKEN_SLOT_BITS)) - 1)
/* A DELETE_LINK gets this long to leave before the QP goes to ERR. */
#define LGR_DELETE_LINK_DRAIN_MS 20

static uint32_t token_slot(uint32_t token)
{
	return token & LGR_TOKEN_SLOT_MASK;
}

/* ---- what the links hand up ------------------------------------------ */

static struct lgr *lgr_of(struct smcr_link *lnk)
{
	return lnk->up.ctx;
}

static void lgr_link_rx_cdc(struct smcr_link *lnk, const uint8_t *buf, uint32_t len)
{
	struct lgr *lgr = lgr_of(lnk);

	lgr->ops->cdc_rx(lgr, buf, len);
}

static void lgr_link_rx_llc(struct smcr_link *lnk, const uint8_t *buf, uint32_t len)
{
	struct lgr *lgr = lgr_of(lnk);

	smcr_llc_rx(lgr, lgr_link_slot(lgr, lnk), buf, len);
}

static void lgr_link_tx_done(struct smcr_link *lnk, const struct smcr_tx_pend *p)
{
	struct lgr *lgr = lgr_of(lnk);

	lgr->ops->tx_done(lgr, p);
}

static void lgr_link_sq_room(struct smcr_link *lnk)
{
	struct lgr *lgr = lgr_of(lnk);

	smcr_llc_send_owed(lgr); /* the peer waits on those */
	lgr->ops->kick_pending(lgr);
}

/*
 * A link failed (@err: a failed work request, a stalled send queue, a
 * fatal async event of its port, QP, CQs or device). It goes down here,
 * once: the caller that takes it down says so and, if it was ACTIVE,
 * counts a link failure (SMCR_LINK_FAILED); a link an orderly end took
 * down before (lgr_terminate(), lgr_free(), lgr_link_drop()) is neither.
 * With another link up, the link goes alone and its connections move
 * there (lgr_link_failover(), Linux's smcr_link_down() ->
 * smc_switch_conns()); otherwise the link group ends with it.
 */
void lgr_link_error(struct smcr_link *lnk, int err, bool orderly)
{
	struct lgr *lgr = lgr_of(lnk);
	int was = smcr_link_deactivate(lnk);

	if (was != SMCR_LNK_ACTIVE && was != SMCR_LNK_ACTIVATING)
		return; /* down already: its flushed work requests, say */
	if (was == SMCR_LNK_ACTIVE)
		smcr_ctx_count_link_event(lgr->sctx, SMCR_LINK_FAILED, 1);
	usmc_log(lgr->sctx->log, was == SMCR_LNK_ACTIVE ? USMC_LOG_INFO : USMC_LOG_DEBUG,
		 "link group %x: link %u (%s:%u) down%s: %s", lgr->id, lnk->link_num, lnk->dev.name,
		 lnk->dev.port, was == SMCR_LNK_ACTIVE ? "" : " before it was up",
		 log_errname(err));
	if (was == SMCR_LNK_ACTIVATING && lgr_link_slot(lgr, lnk) != LGR_FIRST_LINK) {
		lgr_link_drop(lgr, lnk); /* a link being added: nothing on it yet */
		return;
	}
	if (lgr_link_failover(lgr, lnk, err))
		return;
	lgr_terminate(lgr, err, orderly);
}

static const struct smcr_link_handlers lgr_link_handlers = {
	.rx_cdc = lgr_link_rx_cdc,
	.rx_llc = lgr_link_rx_llc,
	.tx_done = lgr_link_tx_done,
	.sq_room = lgr_link_sq_room,
	.error = lgr_link_error,
};

/* ---- verbs objects ---------------------------------------------------- */

static int lgr_pools(struct lgr *lgr)
{
	/* USMC_OPT_MAX_BUFS: fewer buffers per pool than the protocol's 255 */
	struct bufpool_config cfg = {.kind = BUFPOOL_RMB,
				     .max_bufs = lgr->cfg.max_bufs,
				     .ops = &bufpool_verbs_hooks,
				     .ops_ctx = lgr->lnk[LGR_FIRST_LINK].pd};

	smcr_ctx_pool_config(lgr->sctx, lgr, &cfg); /* USMC_OPT_REG_MEM_MAX */
	lgr->rmbs = bufpool_create(&cfg);
	if (!lgr->rmbs)
		return -errno;
	cfg.kind = BUFPOOL_SNDBUF;
	smcr_ctx_pool_config(lgr->sctx, lgr, &cfg);
	lgr->sndbufs = bufpool_create(&cfg);
	return lgr->sndbufs ? 0 : -errno;
}

/* The first link's verbs objects and receives (Linux: smcr_link_init()),
 * then the buffer pools on its PD. */
static int lgr_verbs(struct lgr *lgr)
{
	struct smcr_link *lnk = &lgr->lnk[LGR_FIRST_LINK];
	int rc;

	rc = smcr_link_create(lnk);
	if (!rc)
		rc = smcr_wr_rx_setup(lnk);
	if (!rc)
		rc = lgr_pools(lgr);
	return rc;
}

void lgr_link_init_slot(struct lgr *lgr, int slot, const struct smcr_dev *dev)
{
	struct smcr_link_upper up = {.h = &lgr_link_handlers,
				     .ctx = lgr,
				     .log = lgr->sctx->log,
				     .lgr_id = lgr->id,
				     .st = &lgr->st};

	smcr_link_init(&lgr->lnk[slot], dev, &up);
}

void lgr_link_init(struct lgr *lgr, const struct smcr_dev *dev)
{
	lgr_link_init_slot(lgr, LGR_FIRST_LINK, dev);
}

int lgr_create(struct smcr_ctx *sctx, const struct lgr_conn_ops *ops, const struct lgr_config *cfg,
	       bool is_server, const struct smcr_dev *dev, struct lgr **out)
{
	struct lgr *lgr = calloc(1, sizeof(*lgr));
	int rc;

	if (!lgr)
		return -ENOMEM;
	lgr->sctx = sctx;
	lgr->ops = ops;
	lgr->cfg = *cfg;
	lgr->is_server = is_server;
	lgr->state = LGR_INIT;
	atomic_fetch_add(&sctx->lgrs_open, 1);
	lgr->id = atomic_fetch_add(&sctx->lgr_seq, LGR_ID_STEP) + LGR_ID_STEP;
	lgr->max_conns = SMCR_MAX_CONNS;
	lgr_link_init(lgr, dev);
	pthread_mutex_init(&lgr->lock, NULL);
	smcr_llc_init(&lgr->llc);
	lgr_rtoken_init(&lgr->rtok);
	rc = lgr_progress_init(lgr);
	pthread_mutex_lock(&sctx->lock);
	lgr->all_next = sctx->all;
	sctx->all = lgr;
	pthread_mutex_unlock(&sctx->lock);
	if (!rc)
		rc = lgr_verbs(lgr);
	if (rc) {
		lgr_free(lgr);
		return rc;
	}
	atomic_fetch_add(&sctx->lgrs_created, 1);
	*out = lgr;
	return 0;
}

void lgr_set_peer(struct lgr *lgr, const uint8_t peer_id[SMCR_SYSTEM_ID_LEN],
		  const uint8_t peer_mac[SMCR_MAC_LEN], struct in_addr peer_addr)
{
	memcpy(lgr->peer_id, peer_id, SMCR_SYSTEM_ID_LEN);
	memcpy(lgr->lnk[LGR_FIRST_LINK].peer_mac, peer_mac, SMCR_MAC_LEN);
	lgr->peer_addr = peer_addr;
}

/* ---- connections table ------------------------------------------------ */

/* A free slot of the table, 0 if none; requires @lgr->lock. */
static uint32_t free_slot_locked(const struct lgr *lgr)
{
	if (lgr->nconns >= lgr->max_conns || atomic_load(&lgr->state) == LGR_DEAD)
		return 0;
	for (uint32_t i = 1; i <= SMCR_MAX_CONNS; i++)
		if (!lgr->conns[i].conn)
			return i;
	return 0;
}

int lgr_conn_add(struct lgr *lgr, struct smcr_conn *sc, uint32_t *token)
{
	uint32_t slot, gen;

	pthread_mutex_lock(&lgr->lock);
	slot = free_slot_locked(lgr);
	if (slot) {
		gen = atomic_fetch_add(&lgr->sctx->token_seq, 1) & LGR_TOKEN_GEN_MASK;
		*token = (gen << LGR_TOKEN_SLOT_BITS) | slot;
		lgr->conns[slot] = (struct lgr_slot){.conn = sc, .token = *token};
		lgr->nconns++;
		lgr->ops->get(sc);
	}
	pthread_mutex_unlock(&lgr->lock);
	return slot ? 0 : -ENOSPC;
}

int lgr_conns_get(struct lgr *lgr, struct smcr_conn *list[SMCR_MAX_CONNS])
{
	int n = 0;

	pthread_mutex_lock(&lgr->lock);
	for (int i = 1; i <= SMCR_MAX_CONNS; i++)
		if (lgr->conns[i].conn) {
			list[n++] = lgr->conns[i].conn;
			lgr->ops->get(lgr->conns[i].conn);
		}
	pthread_mutex_unlock(&lgr->lock);
	return n;
}

void lgr_conn_del(struct lgr *lgr, uint32_t token)
{
	struct lgr_slot *s = &lgr->conns[token_slot(token)];
	struct smcr_conn *sc = NULL;

	pthread_mutex_lock(&lgr->lock);
	if (s->conn && s->token == token) {
		sc = s->conn;
		*s = (struct lgr_slot){0};
		if (--lgr->nconns == 0)
			lgr->idle_since_ms = clock_now_ms();
	}
	pthread_mutex_unlock(&lgr->lock);
	if (sc)
		lgr->ops->put(sc);
}

struct smcr_conn *lgr_conn_get(struct lgr *lgr, uint32_t token)
{
	struct lgr_slot *s = &lgr->conns[token_slot(token)];
	struct smcr_conn *sc = NULL;

	pthread_mutex_lock(&lgr->lock);
	if (s->conn && s->token == token) {
		sc = s->conn;
		lgr->ops->get(sc);
	}
	pthread_mutex_unlock(&lgr->lock);
	return sc;
}

/* Remove @sc wherever it is in the table (the link group knows no token of it). */
static void conn_del_ptr(struct lgr *lgr, struct smcr_conn *sc)
{
	uint32_t token = 0;

	pthread_mutex_lock(&lgr->lock);
	for (int i = 1; i <= SMCR_MAX_CONNS && !token; i++)
		if (lgr->conns[i].conn == sc)
			token = lgr->conns[i].token;
	pthread_mutex_unlock(&lgr->lock);
	if (token)
		lgr_conn_del(lgr, token);
}

/* ---- life cycle ----------------------------------------------------- */

int lgr_activate(struct lgr *lgr, uint8_t link_num, uint8_t max_conns)
{
	struct smcr_link *lnk = &lgr->lnk[LGR_FIRST_LINK];
	int expect = LGR_INIT;

	lnk->link_num = link_num;
	lgr->max_conns = max_conns;
	/* only INIT becomes ACTIVE: a link group that died meanwhile stays dead */
	if (!atomic_compare_exchange_strong(&lgr->state, &expect, LGR_ACTIVE))
		return -ECONNABORTED;
	/* and its link, unless lgr_terminate() took it down since */
	smcr_link_activate(lnk);
	usmc_log(lgr->sctx->log, USMC_LOG_INFO, "link group %x up: %s, %s:%u, qp %u <-> peer qp %u",
		 lgr->id, lgr->is_server ? "server" : "client", lnk->dev.name, lnk->dev.port,
		 lnk->qp ? lnk->qp->qp_num : 0, lnk->peer_qpn);
	return 0;
}

/* ACTIVE or INIT -> DEAD, and its links down; false if it was dead already. */
static bool lgr_mark_dead(struct lgr *lgr, bool *was_active)
{
	int expect = LGR_ACTIVE;

	*was_active = atomic_compare_exchange_strong(&lgr->state, &expect, LGR_DEAD);
	if (!*was_active) {
		expect = LGR_INIT;
		if (!atomic_compare_exchange_strong(&lgr->state, &expect, LGR_DEAD))
			return false;
	}
	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		smcr_link_deactivate(&lgr->lnk[i]);
	return true;
}

/* The orderly DELETE_LINK of a link group we end (net/smc/smc_llc.c
 * smc_llc_send_delete_link() with SMC_LLC_DEL_PROG_INIT_TERM), over @via. */
static void lgr_send_delete_link(struct lgr *lgr, struct smcr_link *via)
{
	struct llc_msg m = {.version = LLC_V2,
			    .type = LLC_DELETE_LINK,
			    .flags = LLC_FLAG_DEL_LINK_ALL | LLC_FLAG_DEL_LINK_ORDERLY,
			    .delete_link = {.reason = LLC_DEL_PROG_INIT_TERM}};

	if (smcr_llc_send_force(lgr, via, &m) == 0)
		usleep(LGR_DELETE_LINK_DRAIN_MS * 1000); /* one bounded wait, not a loop */
}

void lgr_terminate(struct lgr *lgr, int err, bool send_delete)
{
	/* the link the LLC goes over, picked while the links are up: after a
	 * failover the first link may be the one that failed, where the
	 * peer would never get our DELETE_LINK and keep its link group */
	struct smcr_link *via = &lgr->lnk[smcr_llc_link_slot(lgr)];
	struct smcr_conn *list[SMCR_MAX_CONNS];
	bool was_active;
	int n;

	if (!lgr_mark_dead(lgr, &was_active))
		return;
	usmc_log(lgr->sctx->log, was_active ? USMC_LOG_INFO : USMC_LOG_DEBUG,
		 "link group %x down%s: %s", lgr->id, was_active ? "" : " before it was up",
		 log_errname(err));
	if (was_active && send_delete)
		lgr_send_delete_link(lgr, via);
	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		smcr_link_qp_error(&lgr->lnk[i]);
	n = lgr_conns_get(lgr, list);
	for (int i = 0; i < n; i++) {
		/* closed by the user, waiting for the peer: nothing to wait for */
		if (lgr->ops->fail(list[i], err))
			conn_del_ptr(lgr, list[i]);
		lgr->ops->put(list[i]);
	}
	smcr_llc_wake_all(lgr);
}

void lgr_get(struct lgr *lgr)
{
	atomic_fetch_add(&lgr->refs, 1);
}

void lgr_put(struct lgr *lgr)
{
	/* the last one frees nothing itself: the progress thread reaps at 0 */
	atomic_fetch_sub(&lgr->refs, 1);
}

/*
 * No reference left (no connection, no finder) and idle for idle_ms or
 * dead: unlink from the context (no one can find it any more) and report
 * true; the caller frees. One reclaimed at a full cap is unlinked already.
 */
bool lgr_idle_unlink(struct lgr *lgr)
{
	struct smcr_ctx *s = lgr->sctx;
	bool expired;

	pthread_mutex_lock(&s->lock);
	pthread_mutex_lock(&lgr->lock);
	expired = lgr->reclaimed;
	if (!expired && !lgr->nconns && !atomic_load(&lgr->refs) && lgr->idle_since_ms &&
	    (clock_now_ms() - lgr->idle_since_ms > lgr->cfg.idle_ms ||
	     atomic_load(&lgr->state) == LGR_DEAD)) {
		for (struct lgr **pp = &s->lgrs; *pp; pp = &(*pp)->next)
			if (*pp == lgr) {
				*pp = lgr->next;
				expired = true;
				break;
			}
	}
	pthread_mutex_unlock(&lgr->lock);
	pthread_mutex_unlock(&s->lock);
	return expired;
}

/* Connections closed by the user but waiting for the peer's close. */
static void lgr_free_orphans(struct lgr *lgr)
{
	for (int i = 1; i <= SMCR_MAX_CONNS; i++)
		if (lgr->conns[i].conn)
			lgr_conn_del(lgr, lgr->conns[i].token);
}

/* Completions of a link's flushed work requests: their references go back. */
void lgr_flush_sends(struct lgr *lgr, struct smcr_link *lnk)
{
	struct smcr_tx_pend p;

	if (!lnk->rcq || !lnk->scq)
		return;
	smcr_wr_drain_cq(lnk);
	while (smcr_wr_send_done(lnk, &p))
		if (p.conn)
			lgr->ops->put(p.conn);
}

/* As Linux's smcr_link_clear(): the QPs first, then what they reached. */
static void lgr_free_verbs(struct lgr *lgr)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		smcr_link_qp_destroy(&lgr->lnk[i]);
	/* the QP is gone: the peer can no longer write into the RMBs */
	if (lgr->rmbs)
		bufpool_destroy(lgr->rmbs, NULL);
	if (lgr->sndbufs)
		bufpool_destroy(lgr->sndbufs, NULL);
	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		if (atomic_load(&lgr->lnk[i].state) == SMCR_LNK_UNUSED)
			continue; /* a slot that never held a link */
		smcr_wr_rx_free(&lgr->lnk[i]);
		smcr_link_free(&lgr->lnk[i]);
	}
}

/* One link group fewer; wakes lgr_destroy_all() at the last one. Its
 * counters go into the context's. */
static void lgr_count_freed(struct smcr_ctx *s, struct lgr *lgr)
{
	pthread_mutex_lock(&s->lock);
	for (struct lgr **pp = &s->all; *pp; pp = &(*pp)->all_next)
		if (*pp == lgr) {
			*pp = lgr->all_next;
			break;
		}
	eng_stats_merge(&s->retired, &lgr->st);
	s->lgrs_leaving -= lgr->reclaimed;
	if (atomic_fetch_sub(&s->lgrs_open, 1) == 1)
		pthread_cond_broadcast(&s->lgrs_cond);
	pthread_mutex_unlock(&s->lock);
}

void lgr_free(struct lgr *lgr)
{
	struct smcr_ctx *s = lgr->sctx;

	if (lgr->lnk[LGR_FIRST_LINK].qp)
		lgr_terminate(lgr, -ECONNABORTED, atomic_load(&lgr->state) == LGR_ACTIVE);
	/* the progress thread first: it starts add-link threads (a peer's
	 * ADD_LINK, the re-add tick), and one it started after the join would
	 * outlive the link group; their waits end with the link group */
	lgr_stop_thread(lgr);
	lgr_links_join(lgr);
	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		lgr_flush_sends(lgr, &lgr->lnk[i]);
	lgr_free_orphans(lgr);
	lgr_free_verbs(lgr);
	if (lgr->stop_fd >= 0)
		close(lgr->stop_fd);
	if (lgr->ep >= 0)
		close(lgr->ep);
	smcr_llc_fini(&lgr->llc);
	lgr_rtoken_fini(&lgr->rtok);
	smcr_eng_fini(&lgr->eng);
	pthread_mutex_destroy(&lgr->lock);
	lgr_count_freed(s, lgr);
	free(lgr);
}

/* How long context teardown waits for link groups that free themselves. */
#define LGR_DESTROY_WAIT_MS 5000

void lgr_destroy_all(struct smcr_ctx *s)
{
	long deadline = clock_now_ms() + LGR_DESTROY_WAIT_MS;
	struct timespec ts;
	struct lgr *l;

	pthread_mutex_lock(&s->lock);
	l = s->lgrs;
	s->lgrs = NULL;
	pthread_mutex_unlock(&s->lock);
	while (l) {
		struct lgr *next = l->next;

		lgr_free(l);
		l = next;
	}
	/* link groups that unlinked themselves when idle may still be finishing */
	clock_deadline_ts(deadline, &ts);
	pthread_mutex_lock(&s->lock);
	while (atomic_load(&s->lgrs_open) > 0 &&
	       pthread_cond_timedwait(&s->lgrs_cond, &s->lock, &ts) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&s->lock);
}
