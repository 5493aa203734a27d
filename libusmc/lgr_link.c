// SPDX-License-Identifier: MIT
/*
 * Links beyond a link group's first (lgr.h), as net/smc/smc_core.c
 * smcr_link_init() / smcr_link_clear() for an added link: a slot, its
 * verbs objects and receives, the group's buffers registered on its PD
 * (Linux: smcr_buf_map_lgr(), smcr_link_reg_buf()), and the engine that
 * runs its completions. Taking one down is two steps: whoever notices
 * moves its QP to ERR at once, and the progress thread, holding the
 * engine's token (so that nobody polls the link meanwhile), frees it.
 * The LLC flows that add a link are smcr_llc_link.c's.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "bufpool.h"
#include "lgr.h"
#include "lgr_int.h"
#include "log.h"

/* A slot that holds no link, not the first's; -ENOSPC if none. */
static int free_slot(struct lgr *lgr)
{
	for (int i = LGR_FIRST_LINK + 1; i < SMCR_LINKS_MAX; i++)
		if (atomic_load(&lgr->lnk[i].state) == SMCR_LNK_UNUSED &&
		    !(atomic_load(&lgr->reap_slots) & (1u << i)))
			return i;
	return -ENOSPC;
}

/* Wake the progress thread: a link to watch, or one to free. */
static void kick_progress(struct lgr *lgr)
{
	uint64_t one = 1;

	if (write(lgr->stop_fd, &one, sizeof(one)) < 0) {
		/* the tick looks anyway */
	}
}

/* The slot holds no link again: its objects gone, the state last (a
 * reader that sees UNUSED reads nothing else of it). */
static void slot_clear(struct smcr_link *lnk)
{
	lnk->qp = NULL;
	lnk->rcq = lnk->scq = NULL;
	lnk->ch = NULL;
	lnk->pd = NULL;
	lnk->ib = NULL;
	lnk->rx_bufs = NULL;
	lnk->rx_mr = NULL;
	memset(&lnk->sq, 0, sizeof(lnk->sq)); /* its lock destroyed: the next link's */
	atomic_store(&lnk->any_pending, false);
	atomic_store(&lnk->state, SMCR_LNK_UNUSED);
}

/* The objects of the link in @slot, the QP first (the peer can no longer
 * write into the buffers), freed: what lgr_link_new() made of a link
 * nobody else has seen, or what is left of a dropped one. */
static void link_unmake(struct lgr *lgr, int slot)
{
	struct smcr_link *lnk = &lgr->lnk[slot];

	smcr_link_qp_destroy(lnk);
	bufpool_reg_del(lgr->rmbs, slot);
	bufpool_reg_del(lgr->sndbufs, slot);
	smcr_wr_rx_free(lnk);
	smcr_link_free(lnk);
	slot_clear(lnk);
}

int lgr_link_new(struct lgr *lgr, const struct smcr_dev *dev, uint8_t link_num,
		 struct smcr_link **out)
{
	int slot = free_slot(lgr);
	struct smcr_link *lnk;
	int rc;

	if (slot < 0)
		return slot;
	lnk = &lgr->lnk[slot];
	/* before the slot is live: an rkey check that sees two links live
	 * sees the new count (smcr_clc.c rkey_known()) */
	atomic_fetch_add(&lgr->links_made, 1);
	lgr_link_init_slot(lgr, slot, dev);
	lnk->link_num = link_num;
	rc = smcr_link_create(lnk);
	if (!rc)
		rc = smcr_wr_rx_setup(lnk);
	if (!rc)
		rc = bufpool_reg_add(lgr->rmbs, slot, lnk->pd);
	if (!rc)
		rc = bufpool_reg_add(lgr->sndbufs, slot, lnk->pd);
	if (rc) {
		link_unmake(lgr, slot);
		return rc;
	}
	smcr_eng_link_add(&lgr->eng, slot, lnk);
	kick_progress(lgr); /* its channel and async events go into the epoll set */
	*out = lnk;
	return 0;
}

void lgr_link_drop(struct lgr *lgr, struct smcr_link *lnk)
{
	int slot = lgr_link_slot(lgr, lnk);

	smcr_link_deactivate(lnk);
	smcr_link_qp_error(lnk);
	if (slot == LGR_FIRST_LINK)
		return; /* the engine's own: its objects go with the link group */
	if (atomic_fetch_or(&lgr->reap_slots, 1u << slot) & (1u << slot))
		return; /* dropped already */
	/* the progress thread needs the token to free it: it takes it when
	 * an application thread next gives it up */
	smcr_eng_hold(&lgr->eng);
	kick_progress(lgr);
}

/* Free the dropped link in @slot; the caller holds the engine's token. */
static void link_reap(struct lgr *lgr, int slot)
{
	struct smcr_link *lnk = &lgr->lnk[slot];

	smcr_eng_link_del(&lgr->eng, slot);
	lgr_ep_link_del(lgr, slot);
	lgr_flush_sends(lgr, lnk);
	lgr_rtoken_clear_link(&lgr->rtok, slot);
	link_unmake(lgr, slot);
	atomic_fetch_and(&lgr->reap_slots, ~(1u << slot));
	smcr_eng_unhold(&lgr->eng);
}

void lgr_links_reap(struct lgr *lgr)
{
	unsigned int slots = atomic_load(&lgr->reap_slots);

	/* an add-link thread may still use a link dropped under it (the one
	 * it adds, failed by a port event; the one its LLC goes over): its
	 * objects wait for the thread's end, within its bounded waits */
	if (atomic_load(&lgr->al_running))
		return;

	for (int i = LGR_FIRST_LINK + 1; slots && i < SMCR_LINKS_MAX; i++)
		if (slots & (1u << i))
			link_reap(lgr, i);
}

void lgr_links_join(struct lgr *lgr)
{
	if (atomic_exchange(&lgr->al_started, false))
		pthread_join(lgr->al_thread, NULL);
}

uint8_t lgr_next_link_num(struct lgr *lgr)
{
	uint8_t num = 0;

	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		if (atomic_load(&lgr->lnk[i].state) != SMCR_LNK_UNUSED &&
		    lgr->lnk[i].link_num > num)
			num = lgr->lnk[i].link_num;
	return num == UINT8_MAX ? 1 : num + 1;
}

struct smcr_link *lgr_link_by_num(struct lgr *lgr, uint8_t link_num)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		int state = atomic_load(&lgr->lnk[i].state);

		if ((state == SMCR_LNK_ACTIVE || state == SMCR_LNK_ACTIVATING) &&
		    lgr->lnk[i].link_num == link_num)
			return &lgr->lnk[i];
	}
	return NULL;
}

int lgr_link_assign(struct lgr *lgr)
{
	int active[SMCR_LINKS_MAX], n = 0, nconns;

	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		if (atomic_load(&lgr->lnk[i].state) == SMCR_LNK_ACTIVE)
			active[n++] = i;
	if (!n)
		return LGR_FIRST_LINK;
	pthread_mutex_lock(&lgr->lock);
	nconns = lgr->nconns;
	pthread_mutex_unlock(&lgr->lock);
	return active[nconns % n];
}

int lgr_link_of_peer(struct lgr *lgr, uint32_t peer_qpn, const uint8_t *peer_gid)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		const struct smcr_link *lnk = &lgr->lnk[i];

		if (atomic_load(&lnk->state) == SMCR_LNK_ACTIVE && lnk->peer_qpn == peer_qpn &&
		    !memcmp(lnk->peer_gid, peer_gid, SMCR_GID_LEN))
			return i;
	}
	return -ENOENT;
}

int lgr_links_live(struct lgr *lgr)
{
	int n = 0;

	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		int state = atomic_load(&lgr->lnk[i].state);

		n += state == SMCR_LNK_ACTIVE || state == SMCR_LNK_ACTIVATING;
	}
	return n;
}

int lgr_links_active(struct lgr *lgr)
{
	int n = 0;

	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		n += atomic_load(&lgr->lnk[i].state) == SMCR_LNK_ACTIVE;
	return n;
}

/* An ACTIVE link of @lgr other than @lnk, or NULL. */
static struct smcr_link *survivor(struct lgr *lgr, const struct smcr_link *lnk)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		if (&lgr->lnk[i] != lnk && atomic_load(&lgr->lnk[i].state) == SMCR_LNK_ACTIVE)
			return &lgr->lnk[i];
	return NULL;
}

/* Move the connections of the link in slot @from to slot @to; how many. */
static int switch_conns(struct lgr *lgr, int from, int to)
{
	struct smcr_conn *list[SMCR_MAX_CONNS];
	int n = lgr_conns_get(lgr, list), moved = 0;

	for (int i = 0; i < n; i++) {
		moved += lgr->ops->switch_link(list[i], from, to);
		lgr->ops->put(list[i]);
	}
	return moved;
}

/* The peer learns that our end of @lnk is gone (Linux:
 * smc_llc_send_delete_link() with SMC_LLC_DEL_LOST_PATH), over @via. */
static void tell_peer(struct lgr *lgr, const struct smcr_link *lnk, struct smcr_link *via)
{
	struct llc_msg m = {
		.version = LLC_V2,
		.type = LLC_DELETE_LINK,
		.flags = LLC_FLAG_DEL_LINK_ORDERLY,
		.delete_link = {.link_num = lnk->link_num, .reason = LLC_DEL_LOST_PATH}};

	smcr_llc_send_on(lgr, via, &m);
}

bool lgr_link_failover(struct lgr *lgr, struct smcr_link *lnk, int err)
{
	struct smcr_link *to = survivor(lgr, lnk);
	int moved;

	if (!to || atomic_load(&lgr->state) != LGR_ACTIVE)
		return false;
	/* its QP to ERR first: what it still had posted completes as failed,
	 * and confirms nothing the connections write again */
	lgr_link_drop(lgr, lnk);
	atomic_store(&lgr->al_refused, false); /* a link to add back: offer again */
	moved = switch_conns(lgr, lgr_link_slot(lgr, lnk), lgr_link_slot(lgr, to));
	smcr_ctx_count_link_event(lgr->sctx, SMCR_LINK_FAILOVER, (uint64_t)moved);
	usmc_log(lgr->sctx->log, USMC_LOG_INFO,
		 "link group %x: failover: %d connection%s from link %u to link %u (%s:%u): %s",
		 lgr->id, moved, moved == 1 ? "" : "s", lnk->link_num, to->link_num, to->dev.name,
		 to->dev.port, log_errname(err));
	if (err != -ECONNRESET) /* not the peer's own DELETE_LINK */
		tell_peer(lgr, lnk, to);
	return true;
}
