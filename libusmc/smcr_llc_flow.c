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
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include "clock.h"
#include "lgr.h"
#include "log.h"
#include "smcr_llc.h"
#include "smcr_llc_int.h"

static void flows_run_waiting(struct lgr *lgr);

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

/* A ticket for a new flow; requires @llc->lock. */
static uint32_t ticket_next_locked(struct smcr_llc *llc)
{
	if (!++llc->last_ticket)
		llc->last_ticket = 1; /* 0 names no flow */
	return llc->last_ticket;
}

/* Own the flow for @req; requires @llc->lock and no flow running. */
static void flow_take_locked(struct smcr_llc *llc, const struct llc_msg *req)
{
	llc->flow_busy = true;
	llc->flow_ticket = ticket_next_locked(llc);
	llc->flow_slot = NULL;
	llc->wait_type = req->type;
	llc->resp_valid = false;
}

/* Own the flow, waiting for a running one at most SMCR_FLOW_WAIT_MS;
 * requires @llc->lock. */
static int flow_begin_locked(struct smcr_llc *llc, const struct llc_msg *req)
{
	long deadline = clock_now_ms() + SMCR_FLOW_WAIT_MS;
	int rc = 0;

	/* counted while it waits: the answer that ends an event-run flow
	 * then leaves the flow free instead of starting the next one */
	llc->begin_waiters++;
	while (!rc && llc->flow_busy)
		rc = llc_wait_until_locked(llc, deadline);
	llc->begin_waiters--;
	if (!rc)
		flow_take_locked(llc, req);
	return rc;
}

/* The flow is over; requires @llc->lock. The caller tells the context
 * (flow_ended()) once it dropped the lock. */
static void flow_end_locked(struct smcr_llc *llc)
{
	llc->flow_busy = false;
	llc->flow_slot = NULL;
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
	flows_run_waiting(lgr);
	if (rc == -ETIMEDOUT)
		warn_unanswered(lgr, req->type);
	return rc;
}

/* ---- flows run as events ------------------------------------------- */

/* The slot of @ticket's flow, or NULL; requires @llc->lock. */
static struct smcr_llc_slot *slot_of_locked(struct smcr_llc *llc, uint32_t ticket)
{
	for (int i = 0; ticket && i < SMCR_LLC_FLOW_SLOTS; i++)
		if (llc->slots[i].ticket == ticket)
			return &llc->slots[i];
	return NULL;
}

/* The waiting flow that asked first (tickets grow, and wrap), or NULL;
 * requires @llc->lock. */
static struct smcr_llc_slot *slot_first_waiting_locked(struct smcr_llc *llc)
{
	struct smcr_llc_slot *first = NULL;

	for (int i = 0; i < SMCR_LLC_FLOW_SLOTS; i++) {
		struct smcr_llc_slot *sl = &llc->slots[i];

		if (sl->ticket && sl->state == LLC_SLOT_WAITING &&
		    (!first || (int32_t)(sl->ticket - first->ticket) < 0))
			first = sl;
	}
	return first;
}

/* @sl's flow is over: 0 with its response, or @rc; requires @llc->lock. */
static void slot_done_locked(struct smcr_llc *llc, struct smcr_llc_slot *sl, int rc)
{
	if (llc->flow_slot == sl)
		flow_end_locked(llc);
	sl->state = LLC_SLOT_DONE;
	sl->rc = rc;
}

/* Start the waiting flow that asked first if the flow is free and no
 * thread waits for it (smcr_llc_flow(): it goes first); requires
 * @llc->lock. The request to send goes into @req; returns its slot. */
static struct smcr_llc_slot *slot_start_locked(struct smcr_llc *llc, uint8_t req[LLC_MSG_LEN])
{
	struct smcr_llc_slot *sl;

	if (llc->flow_busy || llc->begin_waiters || !(sl = slot_first_waiting_locked(llc)))
		return NULL;
	llc->flow_busy = true;
	llc->flow_ticket = sl->ticket;
	llc->flow_slot = sl;
	llc->wait_type = sl->type;
	sl->state = LLC_SLOT_RUNNING;
	sl->sent_ms = clock_now_ms();
	memcpy(req, sl->req, LLC_MSG_LEN);
	return sl;
}

/*
 * Send the waiting flows' requests while the flow is free, the oldest
 * first: one, which runs until its answer (whose arrival calls this
 * again), or each whose request could not be sent (its result says why).
 * Whoever frees the flow calls it: the answer's arrival, a result past its
 * time, an abandon, the end of a waited-for flow, a new flow.
 */
static void flows_run_waiting(struct lgr *lgr)
{
	struct smcr_llc *llc = &lgr->llc;

	for (;;) {
		uint8_t req[LLC_MSG_LEN], type = 0;
		struct smcr_llc_slot *sl;
		uint32_t ticket = 0;
		int rc;

		pthread_mutex_lock(&llc->lock);
		sl = slot_start_locked(llc, req);
		if (sl)
			ticket = sl->ticket, type = sl->type;
		pthread_mutex_unlock(&llc->lock);
		if (!sl)
			return;
		rc = smcr_llc_send_bytes(lgr, type, req, LLC_MSG_LEN);
		if (!rc)
			return;
		pthread_mutex_lock(&llc->lock);
		sl = slot_of_locked(llc, ticket);
		if (sl && sl->state == LLC_SLOT_RUNNING)
			slot_done_locked(llc, sl, rc);
		pthread_mutex_unlock(&llc->lock);
		smcr_ctx_hs_event(lgr->sctx); /* its owner learns it */
	}
}

int smcr_llc_flow_start(struct lgr *lgr, const struct llc_msg *req, uint32_t *ticket)
{
	struct smcr_llc *llc = &lgr->llc;
	struct smcr_llc_slot *sl = NULL;
	uint8_t buf[LLC_MSG_LEN];

	if (llc_encode(req, buf, sizeof(buf)) != LLC_MSG_LEN)
		return -EMSGSIZE;
	pthread_mutex_lock(&llc->lock);
	for (int i = 0; !sl && i < SMCR_LLC_FLOW_SLOTS; i++)
		if (!llc->slots[i].ticket)
			sl = &llc->slots[i];
	llc->slot_refused |= !sl;
	if (sl) {
		*sl = (struct smcr_llc_slot){.ticket = ticket_next_locked(llc),
					     .state = LLC_SLOT_WAITING,
					     .type = req->type};
		memcpy(sl->req, buf, sizeof(buf));
		*ticket = sl->ticket;
	}
	pthread_mutex_unlock(&llc->lock);
	if (!sl)
		return -EBUSY;
	/* the answer must be run as it comes, not when a reader next polls */
	smcr_eng_hold(&lgr->eng);
	flows_run_waiting(lgr);
	return 0;
}

/* What @sl's flow came to: 0 (its response into @resp), -EAGAIN while it
 * runs or waits, or the error that ends it; requires @lgr->llc.lock. */
static int slot_result_locked(struct lgr *lgr, struct smcr_llc_slot *sl, long due_ms,
			      struct llc_msg *resp)
{
	long now = clock_now_ms();

	if (sl->state == LLC_SLOT_DONE)
		return sl->rc ? sl->rc : llc_decode(sl->resp, (uint32_t)sl->resp_len, resp);
	if (atomic_load(&lgr->state) == LGR_DEAD)
		return -ECONNABORTED;
	if (now >= due_ms ||
	    (sl->state == LLC_SLOT_RUNNING && now >= sl->sent_ms + SMCR_LLC_WAIT_MS))
		return -ETIMEDOUT;
	return -EAGAIN;
}

/* The owner is done with @sl (its result, or gone): the slot is free, and
 * if its flow still ran, the flow too; requires @llc->lock. Returns
 * whether handshakes should look again: the flow is free, or a start
 * found no slot. */
static bool slot_free_locked(struct smcr_llc *llc, struct smcr_llc_slot *sl, bool *ran)
{
	bool refused = llc->slot_refused;

	*ran = llc->flow_slot == sl;
	if (*ran)
		flow_end_locked(llc);
	sl->ticket = 0;
	llc->slot_refused = false;
	return *ran || refused;
}

/* After slot_free_locked(), the lock dropped: the engine's hold goes, the
 * handshakes parked on the flow or on a slot look again (@tell), and a
 * flow that ran frees the flow for the next. */
static void slot_freed(struct lgr *lgr, bool ran, bool tell)
{
	smcr_eng_unhold(&lgr->eng);
	if (tell)
		smcr_ctx_hs_event(lgr->sctx);
	if (ran)
		flows_run_waiting(lgr);
}

int smcr_llc_flow_result(struct lgr *lgr, uint32_t ticket, long due_ms, struct llc_msg *resp)
{
	struct smcr_llc *llc = &lgr->llc;
	struct smcr_llc_slot *sl;
	bool ran = false, tell = false;
	uint8_t type = 0;
	int rc;

	pthread_mutex_lock(&llc->lock);
	sl = slot_of_locked(llc, ticket);
	rc = sl ? slot_result_locked(lgr, sl, due_ms, resp) : -ECONNABORTED;
	if (sl && rc != -EAGAIN) {
		type = sl->type;
		tell = slot_free_locked(llc, sl, &ran);
	}
	pthread_mutex_unlock(&llc->lock);
	if (sl && rc != -EAGAIN)
		slot_freed(lgr, ran, tell);
	if (rc == -ETIMEDOUT)
		warn_unanswered(lgr, type);
	return rc;
}

long smcr_llc_flow_due(struct lgr *lgr, uint32_t ticket, long due_ms)
{
	struct smcr_llc_slot *sl;
	long answer_due;

	pthread_mutex_lock(&lgr->llc.lock);
	sl = slot_of_locked(&lgr->llc, ticket);
	answer_due = sl && sl->state == LLC_SLOT_RUNNING ? sl->sent_ms + SMCR_LLC_WAIT_MS : due_ms;
	pthread_mutex_unlock(&lgr->llc.lock);
	return answer_due < due_ms ? answer_due : due_ms;
}

bool smcr_llc_flow_settled(struct lgr *lgr, uint32_t ticket)
{
	struct smcr_llc_slot *sl;
	bool settled;

	pthread_mutex_lock(&lgr->llc.lock);
	sl = slot_of_locked(&lgr->llc, ticket);
	/* not done: no response to decode */
	settled = !sl || sl->state == LLC_SLOT_DONE ||
		  slot_result_locked(lgr, sl, LONG_MAX, NULL) != -EAGAIN;
	pthread_mutex_unlock(&lgr->llc.lock);
	return settled;
}

void smcr_llc_flow_abandon(struct lgr *lgr, uint32_t ticket)
{
	struct smcr_llc_slot *sl;
	bool ran = false, tell = false;

	pthread_mutex_lock(&lgr->llc.lock);
	sl = slot_of_locked(&lgr->llc, ticket);
	if (sl)
		tell = slot_free_locked(&lgr->llc, sl, &ran);
	pthread_mutex_unlock(&lgr->llc.lock);
	if (sl)
		slot_freed(lgr, ran, tell);
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
	flows_run_waiting(lgr);
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

void smcr_llc_deliver_resp(struct lgr *lgr, const struct llc_msg *m, const uint8_t *raw,
			   uint32_t len)
{
	struct smcr_llc *llc = &lgr->llc;
	struct smcr_llc_slot *sl;
	bool awaited;

	pthread_mutex_lock(&llc->lock);
	awaited = llc->wait_type == m->type;
	sl = awaited ? llc->flow_slot : NULL;
	if (sl && len <= sizeof(sl->resp)) {
		/* the flow is free for the next at once: its owner takes the
		 * answer from the slot when it comes back */
		memcpy(sl->resp, raw, len);
		sl->resp_len = (int)len;
		slot_done_locked(llc, sl, 0);
	} else if (sl) {
		slot_done_locked(llc, sl, -EMSGSIZE);
	} else if (awaited) {
		deliver_locked(llc, &llc->resp, &llc->resp_valid, m);
	}
	pthread_mutex_unlock(&llc->lock);
	if (awaited) /* a handshake parked on the answer */
		smcr_ctx_hs_event(lgr->sctx);
	if (sl)
		flows_run_waiting(lgr);
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
