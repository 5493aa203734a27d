// SPDX-License-Identifier: MIT
/*
 * What usmc-stat and the counters read of link groups (lgr.h "statistics"):
 * a copy of each published link group with its links, and the engine
 * counters of one link group or of all a context ever had. Read-only: it
 * takes the context's lock, then each link group's, in the documented
 * order, and changes nothing.
 */
#include <stdio.h>
#include <string.h>

#include "bufpool.h"
#include "lgr.h"

/* Requires sctx->lock (which keeps the link group and its links alive). */
static void lgr_link_info_locked(struct smcr_link *lnk, int slot, struct lgr_link_info *o)
{
	memset(o, 0, sizeof(*o));
	o->slot = slot;
	o->state = atomic_load(&lnk->state);
	/* its local port, fixed before the slot left UNUSED */
	snprintf(o->dev_name, sizeof(o->dev_name), "%s", lnk->dev.name);
	o->port = lnk->dev.port;
	memcpy(o->local_gid, lnk->dev.gid, sizeof(o->local_gid));
	/* the rest is its handshake's until the link is ACTIVE, read-only after */
	if (o->state == SMCR_LNK_ACTIVATING)
		return;
	o->link_num = lnk->link_num;
	memcpy(o->peer_gid, lnk->peer_gid, sizeof(o->peer_gid));
	o->qp_num = lnk->qp ? lnk->qp->qp_num : 0;
	o->peer_qpn = lnk->peer_qpn;
	o->sq_used = smcr_wr_sq_used(lnk);
}

/* Requires sctx->lock (which keeps @l from being freed). */
static void lgr_info_locked(struct lgr *l, struct lgr_info *o)
{
	memset(o, 0, sizeof(*o));
	o->id = l->id;
	o->is_server = l->is_server;
	o->state = atomic_load(&l->state);
	/* published: the peer fields are read-only now */
	memcpy(o->peer_id, l->peer_id, sizeof(o->peer_id));
	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		if (atomic_load(&l->lnk[i].state) != SMCR_LNK_UNUSED)
			lgr_link_info_locked(&l->lnk[i], i, &o->links[o->nlinks++]);
	o->max_conns = l->max_conns;
	pthread_mutex_lock(&l->lock);
	o->nconns = l->nconns;
	pthread_mutex_unlock(&l->lock);
	if (l->rmbs)
		bufpool_usage(l->rmbs, o->rmbs);
	if (l->sndbufs)
		bufpool_usage(l->sndbufs, o->sndbufs);
	o->test_link_sent = atomic_load(&l->llc.test_link_sent);
	o->test_link_answered = atomic_load(&l->llc.test_link_answered);
	o->rkey_confirmed = atomic_load(&l->llc.rkey_confirmed);
	o->rkey_deleted = atomic_load(&l->llc.rkey_deleted);
	lgr_engine_stats(l, &o->engine);
}

const struct lgr_link_info *lgr_info_main_link(const struct lgr_info *g)
{
	for (int i = 0; i < g->nlinks; i++)
		if (g->links[i].state == SMCR_LNK_ACTIVE)
			return &g->links[i];
	return g->nlinks ? &g->links[0] : NULL;
}

void lgr_engine_stats(const struct lgr *lgr, struct usmc_engine_stats *out)
{
	eng_stats_add(&lgr->st, out);
}

void smcr_ctx_engine_stats(struct smcr_ctx *s, struct usmc_engine_stats *out)
{
	pthread_mutex_lock(&s->lock);
	eng_stats_add(&s->retired, out);
	for (struct lgr *l = s->all; l; l = l->all_next)
		eng_stats_add(&l->st, out);
	pthread_mutex_unlock(&s->lock);
}

int lgr_info_all(struct smcr_ctx *sctx, struct lgr_info *out, int max)
{
	int n = 0;

	pthread_mutex_lock(&sctx->lock);
	for (struct lgr *l = sctx->lgrs; l; l = l->next, n++)
		if (n < max)
			lgr_info_locked(l, &out[n]);
	pthread_mutex_unlock(&sctx->lock);
	return n;
}
