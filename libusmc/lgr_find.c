// SPDX-License-Identifier: MIT
/*
 * Which link group a new connection joins (lgr.h), as Linux's
 * net/smc/smc_core.c smc_conn_create() looks for one before it makes one:
 * a published, active link group with that peer (and, for a server, room);
 * else a first contact, one per peer at a time and within the context's
 * caps (Linux serialises first contacts per role with
 * smc_server_lgr_pending and smc_client_lgr_pending, net/smc/af_smc.c).
 * Also the client link groups to a peer held while a handshake waits for
 * its ACCEPT (lgr_hold_peer()).
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "clock.h"
#include "lgr.h"

void lgr_publish(struct lgr *lgr)
{
	struct smcr_ctx *s = lgr->sctx;

	pthread_mutex_lock(&s->lock);
	lgr->next = s->lgrs;
	s->lgrs = lgr;
	pthread_cond_broadcast(&s->lgrs_cond); /* lgr_find_wait() */
	pthread_mutex_unlock(&s->lock);
}

/* Room for one more connection; requires @lgr->lock. */
static bool lgr_has_room_locked(const struct lgr *lgr)
{
	return lgr->nconns < lgr->max_conns;
}

/* A link of @l goes to @k's peer GID (and QP): Linux's smcr_lgr_match(). */
static bool lgr_link_matches(const struct lgr *l, const struct lgr_key *k)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		const struct smcr_link *lnk = &l->lnk[i];

		if (!memcmp(lnk->peer_gid, k->peer_gid, SMCR_GID_LEN) &&
		    (!k->match_qpn || lnk->peer_qpn == k->peer_qpn))
			return true;
	}
	return false;
}

/* @l is a reusable link group with that peer; requires sctx->lock. */
static bool lgr_matches_locked(struct lgr *l, const struct lgr_key *k)
{
	bool room;

	if (l->is_server != (k->role == SMCR_ROLE_SERVER) || atomic_load(&l->state) != LGR_ACTIVE ||
	    l->peer_addr.s_addr != k->peer_addr.s_addr ||
	    memcmp(l->peer_id, k->peer_id, SMCR_SYSTEM_ID_LEN) || !lgr_link_matches(l, k))
		return false;
	/* a server starts a new link group when this one is full (as Linux) */
	pthread_mutex_lock(&l->lock);
	room = lgr_has_room_locked(l);
	pthread_mutex_unlock(&l->lock);
	return room || k->role == SMCR_ROLE_CLIENT;
}

/* The first matching link group, marked in use; requires sctx->lock. */
static struct lgr *lgr_find_locked(struct smcr_ctx *sctx, const struct lgr_key *k)
{
	for (struct lgr *l = sctx->lgrs; l; l = l->next)
		if (lgr_matches_locked(l, k)) {
			lgr_get(l);
			return l;
		}
	return NULL;
}

/* ---- first contacts: one per peer, within the caps -------------------- */

static bool pending_matches(const struct lgr_pending *p, const struct lgr_key *k)
{
	return p->role == k->role && p->peer_addr.s_addr == k->peer_addr.s_addr &&
	       !memcmp(p->peer_id, k->peer_id, SMCR_SYSTEM_ID_LEN) &&
	       !memcmp(p->peer_gid, k->peer_gid, SMCR_GID_LEN);
}

/* A first contact with @k's peer in progress; requires sctx->lock. */
static bool pending_find_locked(const struct smcr_ctx *sctx, const struct lgr_key *k)
{
	for (const struct lgr_pending *p = sctx->pending; p; p = p->next)
		if (pending_matches(p, k))
			return true;
	return false;
}

/*
 * A matching link group (with a reference), waiting until @deadline_ms (0:
 * not at all) while a first contact with that peer is in progress: only it
 * can still publish one. One found is the answer even as the wait runs
 * out: it holds a reference now, which only its user gives back.
 * *@pend: none found and that first contact still runs. Requires
 * sctx->lock (released while waiting).
 */
static struct lgr *lgr_find_wait_locked(struct smcr_ctx *sctx, const struct lgr_key *k,
					long deadline_ms, bool *pend)
{
	struct timespec ts;
	bool timed_out = false;
	struct lgr *l;

	clock_deadline_ts(deadline_ms, &ts);
	for (;;) {
		l = lgr_find_locked(sctx, k);
		*pend = !l && pending_find_locked(sctx, k);
		if (!*pend || !deadline_ms || timed_out)
			return l;
		timed_out = pthread_cond_timedwait(&sctx->lgrs_cond, &sctx->lock, &ts) == ETIMEDOUT;
	}
}

struct lgr *lgr_find_wait(struct smcr_ctx *sctx, const struct lgr_key *k, long deadline_ms,
			  bool *pending)
{
	struct lgr *l;
	bool pend;

	pthread_mutex_lock(&sctx->lock);
	l = lgr_find_wait_locked(sctx, k, deadline_ms, &pend);
	pthread_mutex_unlock(&sctx->lock);
	if (pending)
		*pending = pend;
	return l;
}

/* Room for another link group with @addr under @cfg's caps, counting
 * first contacts in progress; requires sctx->lock. */
static bool caps_allow_locked(const struct smcr_ctx *sctx, struct in_addr addr,
			      const struct lgr_config *cfg)
{
	int same = 0;

	if (atomic_load(&sctx->lgrs_open) >= cfg->max_lgrs)
		return false;
	for (const struct lgr *l = sctx->lgrs; l; l = l->next)
		same += l->peer_addr.s_addr == addr.s_addr;
	for (const struct lgr_pending *p = sctx->pending; p; p = p->next)
		same += p->peer_addr.s_addr == addr.s_addr;
	return same < cfg->max_per_peer;
}

/* Register @p as @k's first contact; requires sctx->lock. */
static void pending_add_locked(struct smcr_ctx *sctx, const struct lgr_key *k,
			       struct lgr_pending *p)
{
	p->role = k->role;
	p->peer_addr = k->peer_addr;
	memcpy(p->peer_id, k->peer_id, SMCR_SYSTEM_ID_LEN);
	memcpy(p->peer_gid, k->peer_gid, SMCR_GID_LEN);
	p->next = sctx->pending;
	sctx->pending = p;
}

int lgr_reserve(struct smcr_ctx *sctx, const struct lgr_key *k, const struct lgr_config *cfg,
		struct lgr_pending *p)
{
	int rc = -EUSERS;

	pthread_mutex_lock(&sctx->lock);
	if (caps_allow_locked(sctx, k->peer_addr, cfg)) {
		pending_add_locked(sctx, k, p);
		rc = 0;
	}
	pthread_mutex_unlock(&sctx->lock);
	return rc;
}

int lgr_claim(struct smcr_ctx *sctx, const struct lgr_key *k, const struct lgr_config *cfg,
	      long deadline_ms, struct lgr_pending *p, struct lgr **reuse)
{
	bool pend;
	int rc = 0;

	pthread_mutex_lock(&sctx->lock);
	*reuse = lgr_find_wait_locked(sctx, k, deadline_ms, &pend);
	if (pend) {
		rc = -ETIMEDOUT;
	} else if (!*reuse) {
		rc = -EUSERS;
		if (caps_allow_locked(sctx, k->peer_addr, cfg)) {
			pending_add_locked(sctx, k, p);
			rc = 0;
		}
	}
	pthread_mutex_unlock(&sctx->lock);
	return rc;
}

void lgr_unclaim(struct smcr_ctx *sctx, struct lgr_pending *p)
{
	pthread_mutex_lock(&sctx->lock);
	for (struct lgr_pending **pp = &sctx->pending; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	pthread_cond_broadcast(&sctx->lgrs_cond); /* lgr_claim() waiters */
	pthread_mutex_unlock(&sctx->lock);
	smcr_ctx_hs_event(sctx); /* parked handshakes of listeners */
}

int lgr_hold_peer(struct smcr_ctx *sctx, struct in_addr peer, struct lgr **held, int max)
{
	int n = 0;

	pthread_mutex_lock(&sctx->lock);
	for (struct lgr *l = sctx->lgrs; l && n < max; l = l->next)
		if (!l->is_server && l->peer_addr.s_addr == peer.s_addr &&
		    atomic_load(&l->state) == LGR_ACTIVE) {
			lgr_get(l);
			held[n++] = l;
		}
	pthread_mutex_unlock(&sctx->lock);
	for (int i = 0; i < n; i++)
		smcr_eng_hold(&held[i]->eng);
	return n;
}

void lgr_unhold_peer(struct lgr **held, int n)
{
	for (int i = 0; i < n; i++) {
		smcr_eng_unhold(&held[i]->eng);
		lgr_put(held[i]);
	}
}
