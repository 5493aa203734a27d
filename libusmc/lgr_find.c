// SPDX-License-Identifier: MIT
/*
 * Which link group a new connection joins (lgr.h), as Linux's
 * net/smc/smc_core.c smc_conn_create() looks for one before it makes one:
 * a published, active link group with that peer (and, for a server, room);
 * else a first contact, one per peer at a time and within the context's
 * caps (lgr_cap.h), idle link groups reclaimed for it at a full cap (Linux
 * serialises first contacts per role with smc_server_lgr_pending and
 * smc_client_lgr_pending, net/smc/af_smc.c, and has no cap).
 * Also the client link groups to a peer held while a handshake waits for
 * its ACCEPT (lgr_hold_peer()).
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "clock.h"
#include "lgr.h"
#include "lgr_cap.h"
#include "log.h"

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
		int state = atomic_load(&lnk->state);

		if (state != SMCR_LNK_UNUSED && state != SMCR_LNK_INACTIVE &&
		    !memcmp(lnk->peer_gid, k->peer_gid, SMCR_GID_LEN) &&
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

/* ---- the caps (lgr_cap.h): room for a first contact ------------------- */

/* When @l went idle, if it is reclaimable now (no connection, and no
 * reference: none can be taken while sctx->lock is held); else 0.
 * Requires sctx->lock; takes l->lock (the documented order). */
static long lgr_idle_since_locked(struct lgr *l)
{
	long since;

	pthread_mutex_lock(&l->lock);
	since = !l->nconns && !atomic_load(&l->refs) ? l->idle_since_ms : 0;
	pthread_mutex_unlock(&l->lock);
	return since;
}

/*
 * Places of max_lgrs taken: every link group created and not yet freed
 * (less those reclaimed for a first contact), where a first contact's
 * claim stands for its link group from the claim on, so that claims
 * admitted side by side never overshoot the cap before their link groups
 * exist. Requires sctx->lock.
 */
static int cap_open_locked(const struct smcr_ctx *sctx)
{
	int open = atomic_load(&sctx->lgrs_open) - sctx->lgrs_leaving;

	/* a handshake's INIT link group is counted by its claim */
	for (const struct lgr *l = sctx->all; l; l = l->all_next)
		open -= atomic_load(&l->state) == LGR_INIT;
	for (const struct lgr_pending *p = sctx->pending; p; p = p->next)
		open++;
	return open;
}

/* The context's link groups as a first contact with @addr sees them;
 * requires sctx->lock. */
static void cap_load_locked(const struct smcr_ctx *sctx, struct in_addr addr,
			    struct lgr_cap_load *ld)
{
	*ld = (struct lgr_cap_load){.open = cap_open_locked(sctx)};
	for (struct lgr *l = sctx->lgrs; l; l = l->next) {
		bool mine = l->peer_addr.s_addr == addr.s_addr;
		bool idle = lgr_idle_since_locked(l) != 0;

		ld->peer += mine;
		ld->idle += idle;
		ld->peer_idle += mine && idle;
	}
	for (const struct lgr_pending *p = sctx->pending; p; p = p->next) {
		bool mine = p->peer_addr.s_addr == addr.s_addr;

		ld->peer += mine;
		if (p->role == SMCR_ROLE_SERVER) {
			ld->hs++;
			ld->peer_hs += mine;
		}
	}
}

/*
 * Reclaim the idle link group (with @addr only, if not NULL) idle the
 * longest: unlinked, so that nobody finds it any more, its place given to
 * the caller; its progress thread frees it at its next tick
 * (lgr_idle_unlink()), with a DELETE_LINK as at its idle timeout (Linux
 * smc_core.c smc_lgr_free_work()). Requires sctx->lock.
 */
static void reclaim_oldest_locked(struct smcr_ctx *sctx, const struct in_addr *addr)
{
	struct lgr **victim = NULL, *l;
	long oldest = 0;

	for (struct lgr **pp = &sctx->lgrs; *pp; pp = &(*pp)->next) {
		long since;

		if (addr && (*pp)->peer_addr.s_addr != addr->s_addr)
			continue;
		since = lgr_idle_since_locked(*pp);
		if (since && (!victim || since < oldest)) {
			victim = pp;
			oldest = since;
		}
	}
	if (!victim)
		return; /* lgr_cap_decide() counted them: not reached */
	l = *victim;
	*victim = l->next;
	l->reclaimed = true;
	sctx->lgrs_leaving++;
	atomic_fetch_add(&sctx->lgrs_reclaimed, 1);
	usmc_log(sctx->log, USMC_LOG_INFO,
		 "link group %x reclaimed after %ld s idle: the link group cap%s is full", l->id,
		 (clock_now_ms() - oldest) / 1000, addr ? " of its peer's address" : "");
}

/* Room for a first contact with @k under @cfg's caps, after reclaiming
 * the idle link groups it takes; requires sctx->lock. */
static bool caps_admit_locked(struct smcr_ctx *sctx, const struct lgr_key *k,
			      const struct lgr_config *cfg)
{
	struct lgr_cap_load ld;
	struct lgr_cap_verdict v;

	cap_load_locked(sctx, k->peer_addr, &ld);
	v = lgr_cap_decide(&ld, cfg->max_lgrs, cfg->max_per_peer, k->role == SMCR_ROLE_SERVER);
	if (v.refused) {
		const uint8_t *a = (const uint8_t *)&k->peer_addr.s_addr;

		usmc_log(sctx->log, USMC_LOG_DEBUG, "first contact with %u.%u.%u.%u refused: %s",
			 a[0], a[1], a[2], a[3], lgr_cap_refusal_name(v.refused));
		return false;
	}
	for (int i = 0; i < v.reclaim_peer; i++)
		reclaim_oldest_locked(sctx, &k->peer_addr);
	for (int i = 0; i < v.reclaim_any; i++)
		reclaim_oldest_locked(sctx, NULL);
	return true;
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
	if (caps_admit_locked(sctx, k, cfg)) {
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
		if (caps_admit_locked(sctx, k, cfg)) {
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
