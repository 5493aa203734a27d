// SPDX-License-Identifier: MIT
/*
 * Locally started LLC flows of a link group (smcr_llc.h), as
 * net/smc/smc_llc.c smc_llc_flow_initiate() .. smc_llc_flow_stop(): one at
 * a time, each a request and the response of its type; run by a thread
 * that waits for the answer (smcr_llc_flow()) or as events by a handshake
 * that must not wait (smcr_llc_flow_start()). smcr_llc.c receives the
 * responses and hands them here.
 */
#include <errno.h>
#include <pthread.h>

#include "clock.h"
#include "lgr.h"
#include "log.h"
#include "smcr_llc.h"
#include "smcr_llc_int.h"

/* ---- waits ----------------------------------------------------------- */

/* Wait on @llc->cond until @deadline_ms; requires @llc->lock. Not a
 * cancellation point: a thread cancelled in there would leave the lock
 * held (a handshake's thread waits here). */
static int llc_wait_until_locked(struct smcr_llc *llc, long deadline_ms)
{
	struct timespec ts;
	int cancel;

	if (clock_now_ms() >= deadline_ms)
		return -ETIMEDOUT;
	clock_deadline_ts(deadline_ms, &ts);
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	pthread_cond_timedwait(&llc->cond, &llc->lock, &ts);
	pthread_setcancelstate(cancel, &cancel);
	return 0;
}

/* Wait until *@done, the link group's death or @deadline_ms; requires
 * lgr->llc.lock. */
static int llc_await_locked(struct lgr *lgr, const bool *done, long deadline_ms)
{
	int rc = 0;

	while (!rc && !*done) {
		if (atomic_load(&lgr->state) == LGR_DEAD)
			rc = -ECONNABORTED;
		else
			rc = llc_wait_until_locked(&lgr->llc, deadline_ms);
	}
	return rc;
}

/* ---- flows ----------------------------------------------------------- */

/* Own the flow for @req; requires @llc->lock and no flow running. */
static void flow_take_locked(struct smcr_llc *llc, const struct llc_msg *req)
{
	llc->flow_busy = true;
	if (!++llc->flow_ticket)
		llc->flow_ticket = 1; /* 0 names no flow */
	llc->wait_type = req->type;
	llc->resp_valid = false;
}

/* Own the flow, waiting for a running one at most SMCR_FLOW_WAIT_MS;
 * requires @llc->lock. */
static int flow_begin_locked(struct smcr_llc *llc, const struct llc_msg *req)
{
	long deadline = clock_now_ms() + SMCR_FLOW_WAIT_MS;
	int rc = 0;

	while (!rc && llc->flow_busy)
		rc = llc_wait_until_locked(llc, deadline);
	if (!rc)
		flow_take_locked(llc, req);
	return rc;
}

/* The flow is over; requires @llc->lock. The caller tells the context
 * (flow_ended()) once it dropped the lock. */
static void flow_end_locked(struct smcr_llc *llc)
{
	llc->flow_busy = false;
	llc->wait_type = 0;
	pthread_cond_broadcast(&llc->cond);
}

/* A flow ended: handshakes parked until the flow is free, or until its
 * answer came, look again; and the engine need not run answers at once. */
static void flow_ended(struct lgr *lgr)
{
	smcr_eng_unhold(&lgr->eng);
	smcr_ctx_hs_event(lgr->sctx);
}

static void warn_unanswered(struct lgr *lgr, uint8_t type)
{
	/* a lost peer or a slow one: operators want to know */
	usmc_log(lgr->sctx->log, USMC_LOG_WARN,
		 "link group %x: LLC request 0x%x unanswered after %d ms", lgr->id, type,
		 SMCR_LLC_WAIT_MS);
}

int smcr_llc_flow(struct lgr *lgr, const struct llc_msg *req, struct llc_msg *resp)
{
	return smcr_llc_flow_on(lgr, NULL, req, resp);
}

int smcr_llc_flow_on(struct lgr *lgr, struct smcr_link *lnk, const struct llc_msg *req,
		     struct llc_msg *resp)
{
	struct smcr_llc *llc = &lgr->llc;
	long deadline;
	int rc;

	/* Linux waits up to 20 s for a running flow, then 2 s for the answer */
	pthread_mutex_lock(&llc->lock);
	rc = flow_begin_locked(llc, req);
	pthread_mutex_unlock(&llc->lock);
	if (rc)
		return rc;
	/* the answer must be run as it comes, not when a reader next polls */
	smcr_eng_hold(&lgr->eng);
	rc = lnk ? smcr_llc_send_on(lgr, lnk, req) : smcr_llc_send(lgr, req);
	deadline = clock_now_ms() + SMCR_LLC_WAIT_MS;
	pthread_mutex_lock(&llc->lock);
	if (!rc)
		rc = llc_await_locked(lgr, &llc->resp_valid, deadline);
	if (!rc)
		*resp = llc->resp;
	flow_end_locked(llc);
	pthread_mutex_unlock(&llc->lock);
	flow_ended(lgr);
	if (rc == -ETIMEDOUT)
		warn_unanswered(lgr, req->type);
	return rc;
}

int smcr_llc_flow_start(struct lgr *lgr, const struct llc_msg *req, uint32_t *ticket)
{
	struct smcr_llc *llc = &lgr->llc;
	int rc;

	pthread_mutex_lock(&llc->lock);
	if (llc->flow_busy) {
		pthread_mutex_unlock(&llc->lock);
		return -EBUSY;
	}
	flow_take_locked(llc, req);
	*ticket = llc->flow_ticket;
	pthread_mutex_unlock(&llc->lock);
	smcr_eng_hold(&lgr->eng);
	rc = smcr_llc_send(lgr, req);
	if (rc) {
		smcr_llc_flow_abandon(lgr, *ticket);
		*ticket = 0; /* no flow for the caller to abandon again */
	}
	return rc;
}

/* Is @ticket's flow still running; requires @llc->lock. */
static bool flow_owned_locked(const struct smcr_llc *llc, uint32_t ticket)
{
	return llc->flow_busy && llc->flow_ticket == ticket;
}

int smcr_llc_flow_result(struct lgr *lgr, uint32_t ticket, long due_ms, struct llc_msg *resp)
{
	struct smcr_llc *llc = &lgr->llc;
	bool owned, over;
	uint8_t type;
	int rc = -EAGAIN;

	pthread_mutex_lock(&llc->lock);
	owned = flow_owned_locked(llc, ticket);
	type = llc->wait_type;
	if (!owned)
		rc = -ECONNABORTED; /* not ours: never for an honest caller */
	else if (llc->resp_valid)
		rc = 0;
	else if (atomic_load(&lgr->state) == LGR_DEAD)
		rc = -ECONNABORTED;
	else if (clock_now_ms() >= due_ms)
		rc = -ETIMEDOUT;
	if (!rc)
		*resp = llc->resp;
	over = owned && rc != -EAGAIN;
	if (over)
		flow_end_locked(llc);
	pthread_mutex_unlock(&llc->lock);
	if (over)
		flow_ended(lgr);
	if (rc == -ETIMEDOUT)
		warn_unanswered(lgr, type);
	return rc;
}

bool smcr_llc_flow_settled(struct lgr *lgr, uint32_t ticket)
{
	struct smcr_llc *llc = &lgr->llc;
	bool settled;

	pthread_mutex_lock(&llc->lock);
	settled = !flow_owned_locked(llc, ticket) || llc->resp_valid ||
		  atomic_load(&lgr->state) == LGR_DEAD;
	pthread_mutex_unlock(&llc->lock);
	return settled;
}

void smcr_llc_flow_abandon(struct lgr *lgr, uint32_t ticket)
{
	struct smcr_llc *llc = &lgr->llc;
	bool owned;

	pthread_mutex_lock(&llc->lock);
	owned = flow_owned_locked(llc, ticket);
	if (owned)
		flow_end_locked(llc);
	pthread_mutex_unlock(&llc->lock);
	if (owned)
		flow_ended(lgr);
}

int smcr_llc_flow_own(struct lgr *lgr)
{
	static const struct llc_msg none = {0}; /* awaits no response */
	struct smcr_llc *llc = &lgr->llc;
	int rc;

	pthread_mutex_lock(&llc->lock);
	rc = flow_begin_locked(llc, &none);
	if (!rc)
		llc->confirm_req_valid = false; /* the next CONFIRM_LINK is the new link's */
	pthread_mutex_unlock(&llc->lock);
	if (!rc)
		smcr_eng_hold(&lgr->eng);
	return rc;
}

void smcr_llc_flow_disown(struct lgr *lgr)
{
	pthread_mutex_lock(&lgr->llc.lock);
	flow_end_locked(&lgr->llc);
	pthread_mutex_unlock(&lgr->llc.lock);
	flow_ended(lgr);
}

int smcr_llc_wait_confirm_link(struct lgr *lgr, int timeout_ms, struct llc_msg *req)
{
	struct smcr_llc *llc = &lgr->llc;
	long deadline = clock_now_ms() + timeout_ms;
	int rc;

	pthread_mutex_lock(&llc->lock);
	rc = llc_await_locked(lgr, &llc->confirm_req_valid, deadline);
	if (!rc)
		*req = llc->confirm_req;
	pthread_mutex_unlock(&llc->lock);
	return rc;
}

void smcr_llc_wake_all(struct lgr *lgr)
{
	pthread_mutex_lock(&lgr->llc.lock);
	pthread_cond_broadcast(&lgr->llc.cond);
	pthread_mutex_unlock(&lgr->llc.lock);
	smcr_ctx_hs_event(lgr->sctx); /* handshakes parked on its flows */
}

/* ---- responses, from the receive path ------------------------------- */

/* Hand @m to the flow that waits for it in @slot, unless the slot holds
 * one already (a duplicate is the peer's, and dropped); requires
 * llc->lock. */
static void deliver_locked(struct smcr_llc *llc, struct llc_msg *slot, bool *full,
			   const struct llc_msg *m)
{
	if (*full)
		return;
	*slot = *m;
	*full = true;
	pthread_cond_broadcast(&llc->cond);
}

void smcr_llc_deliver_resp(struct lgr *lgr, const struct llc_msg *m)
{
	struct smcr_llc *llc = &lgr->llc;
	bool awaited;

	pthread_mutex_lock(&llc->lock);
	awaited = llc->wait_type == m->type;
	if (awaited)
		deliver_locked(llc, &llc->resp, &llc->resp_valid, m);
	pthread_mutex_unlock(&llc->lock);
	if (awaited) /* a handshake parked on the answer */
		smcr_ctx_hs_event(lgr->sctx);
}

/* Only a client waits for the server's CONFIRM_LINK request. */
void smcr_llc_deliver_confirm_link(struct lgr *lgr, const struct llc_msg *m)
{
	if (lgr->is_server)
		return;
	pthread_mutex_lock(&lgr->llc.lock);
	deliver_locked(&lgr->llc, &lgr->llc.confirm_req, &lgr->llc.confirm_req_valid, m);
	pthread_mutex_unlock(&lgr->llc.lock);
}
