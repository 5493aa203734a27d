// SPDX-License-Identifier: MIT
/*
 * LLC flows of a link group (smcr_llc.h), as net/smc/smc_llc.c: one
 * locally started flow at a time, the peer's requests answered from the
 * progress thread on the send queue entries reserved for LLC, TEST_LINK
 * when the link has been quiet.
 */
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "lgr.h"
#include "log.h"
#include "smcr_llc.h"
#include "smcr_llc_int.h"
#include "wire_bytes.h"

void smcr_llc_init(struct smcr_llc *llc)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&llc->lock, NULL);
	/* deadlines are monotonic: the wall clock may jump */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&llc->cond, &ca);
	pthread_condattr_destroy(&ca);
}

void smcr_llc_fini(struct smcr_llc *llc)
{
	pthread_cond_destroy(&llc->cond);
	pthread_mutex_destroy(&llc->lock);
}

/* The link LLC messages go on (Linux: smc_llc_usable_link()): the first
 * active one, else the first (a dead link group's last words). */
static struct smcr_link *llc_link(struct lgr *lgr)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		if (atomic_load(&lgr->lnk[i].state) == SMCR_LNK_ACTIVE)
			return &lgr->lnk[i];
	return &lgr->lnk[LGR_FIRST_LINK];
}

int smcr_llc_link_slot(struct lgr *lgr)
{
	return (int)(llc_link(lgr) - lgr->lnk);
}

/* Post the encoded LLC message @buf of @len bytes on @lnk: inline, or from
 * the link's buffer for long ones (smcr_wr_long_buf()). */
static int llc_post_bytes(struct lgr *lgr, struct smcr_link *lnk, const uint8_t *buf, int len,
			  enum smcr_sq_class cls)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = (uint32_t)len};
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE,
	};
	struct smcr_tx_pend p = {0};
	int rc;

	if (len > LLC_MSG_LEN) { /* a 44-byte one always goes inline (SMCR_MAX_INLINE) */
		uint8_t *lb = smcr_wr_long_buf(lnk, &sge.lkey);

		memcpy(lb, buf, (size_t)len);
		sge.addr = (uintptr_t)lb;
		wr.send_flags &= ~(unsigned)IBV_SEND_INLINE;
	}
	rc = smcr_wr_post_send(lnk, &wr, 1, &p, cls);
	if (!rc)
		atomic_fetch_add_explicit(&lgr->sctx->llc_sent, 1, memory_order_relaxed);
	return rc;
}

/* A request of ours that left: CONFIRM_RKEY and DELETE_RKEY are counted
 * where they leave, so that a reader never sees half of an answer's
 * accounting (tests subtract nothing to find our flows). */
static void count_rkey_request(struct lgr *lgr, uint8_t type)
{
	if (type == LLC_CONFIRM_RKEY || type == LLC_DELETE_RKEY)
		atomic_fetch_add_explicit(&lgr->llc.rkey_requests, 1, memory_order_relaxed);
}

static int llc_post(struct lgr *lgr, struct smcr_link *lnk, const struct llc_msg *m,
		    enum smcr_sq_class cls)
{
	static _Thread_local uint8_t
		buf[LLC_V2_BUF_LEN]; /* an ADD_LINK's rkeys: not on the stack */
	int len = llc_encode(m, buf, sizeof(buf));

	if (len < 0)
		return len;
	len = llc_post_bytes(lgr, lnk, buf, len, cls);
	if (len)
		return len;
	if (!(m->flags & LLC_FLAG_RESP))
		count_rkey_request(lgr, m->type);
	return 0;
}

int smcr_llc_send_bytes(struct lgr *lgr, uint8_t type, const uint8_t *buf, int len)
{
	int rc = llc_post_bytes(lgr, llc_link(lgr), buf, len, SMCR_SQ_LLC);

	if (!rc)
		count_rkey_request(lgr, type);
	return rc;
}

int smcr_llc_send(struct lgr *lgr, const struct llc_msg *m)
{
	return llc_post(lgr, llc_link(lgr), m, SMCR_SQ_LLC);
}

int smcr_llc_send_on(struct lgr *lgr, struct smcr_link *lnk, const struct llc_msg *m)
{
	return llc_post(lgr, lnk, m, SMCR_SQ_LLC);
}

int smcr_llc_send_force(struct lgr *lgr, struct smcr_link *lnk, const struct llc_msg *m)
{
	return llc_post(lgr, lnk, m, SMCR_SQ_LLC_FORCE);
}

/* user_data of a barrier's TEST_LINK: this tag, then the generation (big
 * endian); our keepalive's is all zero */
static const uint8_t barrier_tag[8] = {'u', 's', 'm', 'c', '-', 'e', 'o', 'f'};

uint32_t smcr_llc_barrier(struct lgr *lgr)
{
	struct llc_msg m = {.version = LLC_V2, .type = LLC_TEST_LINK};
	uint32_t gen;

	do
		gen = atomic_fetch_add(&lgr->llc.barrier_gen, 1) + 1;
	while (!gen);
	memcpy(m.test_link.user_data, barrier_tag, sizeof(barrier_tag));
	put_be32(m.test_link.user_data + sizeof(barrier_tag), gen);
	smcr_llc_send(lgr, &m);
	return gen;
}

/* The generation of a barrier's answer @m, 0 if it is not one. */
static uint32_t barrier_of(const struct llc_msg *m)
{
	if (m->type != LLC_TEST_LINK ||
	    memcmp(m->test_link.user_data, barrier_tag, sizeof(barrier_tag)))
		return 0;
	return get_be32(m->test_link.user_data + sizeof(barrier_tag));
}

/* ---- answers owed: the send queue was full ---------------------------- */

/* Keep @m's encoding behind the answers already owed; requires llc->lock. */
static void owe_locked(struct lgr *lgr, int slot, const struct llc_msg *m)
{
	struct smcr_llc *llc = &lgr->llc;
	struct llc_owed *o = &llc->owed[llc->owed_n];

	if (llc->owed_n == SMCR_LLC_OWED) {
		atomic_fetch_add(&llc->answers_lost, 1);
		return;
	}
	o->len = llc_encode(m, o->b, sizeof(o->b));
	o->slot = slot;
	if (o->len > 0) {
		llc->owed_n++;
		atomic_fetch_add(&llc->answers_owed, 1);
	}
}

/* The oldest answer owed, taken off the list into @o; false if none. */
static bool owed_take(struct smcr_llc *llc, struct llc_owed *o)
{
	bool any;

	pthread_mutex_lock(&llc->lock);
	any = llc->owed_n > 0;
	if (any) {
		*o = llc->owed[0];
		memmove(&llc->owed[0], &llc->owed[1], --llc->owed_n * sizeof(*o));
	}
	pthread_mutex_unlock(&llc->lock);
	return any;
}

/* @o found no room again: back at the head, where it was. */
static void owed_put_back(struct smcr_llc *llc, const struct llc_owed *o)
{
	pthread_mutex_lock(&llc->lock);
	if (llc->owed_n == SMCR_LLC_OWED) /* owed meanwhile: the newest goes */
		llc->owed_n--;
	memmove(&llc->owed[1], &llc->owed[0], llc->owed_n * sizeof(*o));
	llc->owed[0] = *o;
	llc->owed_n++;
	pthread_mutex_unlock(&llc->lock);
}

/* The link an answer to a request that came over @slot goes on: that one
 * while it is up or coming up, else the LLC link (the answer to a
 * DELETE_LINK of the link it came over, say). */
static struct smcr_link *answer_link(struct lgr *lgr, int slot)
{
	int st = slot >= 0 && slot < SMCR_LINKS_MAX ? atomic_load(&lgr->lnk[slot].state)
						    : SMCR_LNK_INACTIVE;

	return st == SMCR_LNK_ACTIVE || st == SMCR_LNK_ACTIVATING ? &lgr->lnk[slot] : llc_link(lgr);
}

void smcr_llc_send_owed(struct lgr *lgr)
{
	struct llc_owed o;

	/* posted outside llc->lock, a leaf: the send queue has its own */
	while (owed_take(&lgr->llc, &o))
		if (llc_post_bytes(lgr, answer_link(lgr, o.slot), o.b, o.len, SMCR_SQ_LLC) ==
		    -EAGAIN) {
			/* the refusal marked the link: room calls us again */
			owed_put_back(&lgr->llc, &o);
			return;
		}
	/* sent, or the link is gone and so is the need */
}

/* Send @m, the answer to a peer's request, behind the answers still owed;
 * kept if the send queue is full. */
void smcr_llc_answer(struct lgr *lgr, int slot, const struct llc_msg *m)
{
	struct smcr_llc *llc = &lgr->llc;
	bool behind;

	pthread_mutex_lock(&llc->lock);
	behind = llc->owed_n > 0;
	if (behind)
		owe_locked(lgr, slot, m);
	pthread_mutex_unlock(&llc->lock);
	if (behind) {
		smcr_llc_send_owed(lgr);
		return;
	}
	if (llc_post(lgr, answer_link(lgr, slot), m, SMCR_SQ_LLC) != -EAGAIN)
		return;
	pthread_mutex_lock(&llc->lock);
	owe_locked(lgr, slot, m);
	pthread_mutex_unlock(&llc->lock);
	/* room that came back before it was kept called for nothing */
	smcr_llc_send_owed(lgr);
}

/* ---- the peer's rkeys (lgr.rtok) ------------------------------------- */

/* The slot of @lgr's link numbered @link_id (ACTIVATING or ACTIVE), -1 if
 * none (Linux: smc_rtoken_set2() looks for lnk[].link_id). */
static int rtok_slot_of(struct lgr *lgr, uint8_t link_id)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		int st = atomic_load(&lgr->lnk[i].state);

		if ((st == SMCR_LNK_ACTIVATING || st == SMCR_LNK_ACTIVE) &&
		    lgr->lnk[i].link_num == link_id)
			return i;
	}
	return -1;
}

/*
 * The peer's CONFIRM_RKEY @m, received over the link in @slot (net/smc/
 * smc_llc.c smc_llc_rmt_conf_rkey()): its RMB's row, the first entry for
 * that link, each additional entry for the link it names (one we do not
 * know, or the receiving link again, is ignored; the decoder refused more
 * than LLC_CONFIRM_RKEY_EXTRA). Refused with NEG|RETRY when the table is
 * full: the peer then declines its connection.
 */
static void answer_confirm_rkey(struct lgr *lgr, int slot, struct llc_msg *m)
{
	const struct llc_confirm_rkey *c = &m->confirm_rkey;
	int row = lgr_rtoken_add(&lgr->rtok, slot, c->rkey, c->vaddr);

	for (unsigned int i = 0; row > 0 && i < c->num_extra && i < LLC_CONFIRM_RKEY_EXTRA; i++) {
		int s = rtok_slot_of(lgr, c->extra[i].link_id);

		if (s >= 0 && s != slot)
			lgr_rtoken_set(&lgr->rtok, row, s, c->extra[i].rkey, c->extra[i].vaddr);
	}
	if (row < 0)
		usmc_log(lgr->sctx->log, USMC_LOG_WARN,
			 "link group %x: the peer's RMBs fill its %d rtokens: rkey %08x refused",
			 lgr->id, LGR_RTOKEN_ROWS, c->rkey);
	llc_confirm_rkey_response(m, row > 0);
	atomic_fetch_add(&lgr->llc.rkey_confirmed, 1);
}

/* The peer's DELETE_RKEY @m, received over the link in @slot (smc_llc.c
 * smc_llc_rmt_delete_rkey()): each rkey's row goes; the unknown ones are
 * marked in the answer. */
static void answer_delete_rkey(struct lgr *lgr, int slot, struct llc_msg *m)
{
	bool unknown[LLC_V2_DEL_RKEY_MAX] = {false};
	struct llc_delete_rkey *d = &m->delete_rkey;

	for (unsigned int i = 0; i < d->num_rkeys && i < LLC_V2_DEL_RKEY_MAX; i++)
		unknown[i] = !lgr_rtoken_del(&lgr->rtok, slot, d->rkeys[i]);
	llc_delete_rkey_response(m, unknown);
	atomic_fetch_add(&lgr->llc.rkey_deleted, 1);
}

/* ---- receive --------------------------------------------------------- */

/* Answer a request the peer started; the reserved LLC send entries make
 * room, and when even they are taken the answer waits for room. */
static void answer(struct lgr *lgr, int slot, struct llc_msg *m)
{
	switch (m->type) {
	case LLC_TEST_LINK:
		llc_make_response(m);
		atomic_fetch_add(&lgr->llc.test_link_answered, 1);
		break;
	case LLC_CONFIRM_RKEY: /* its rkey is the one for the link it came over */
		answer_confirm_rkey(lgr, slot, m);
		break;
	case LLC_DELETE_RKEY:
		answer_delete_rkey(lgr, slot, m);
		break;
	case LLC_ADD_LINK: /* taken on its own thread, or rejected */
		smcr_llc_add_link_rx(lgr, slot, m);
		return;
	case LLC_REQ_ADD_LINK:
		if (smcr_llc_req_add_link_rx(lgr))
			return; /* the server's ADD_LINK is the answer */
		/* "cannot start": a response of zeros (net/smc/smc_llc.c
		 * smc_llc_process_srv_add_link() on a v2 request it refuses) */
		memset(&m->req_add_link, 0, sizeof(m->req_add_link));
		m->flags = LLC_FLAG_RESP;
		break;
	default:
		return;
	}
	smcr_llc_answer(lgr, slot, m);
}

/*
 * The peer's DELETE_LINK (Linux: smc_llc_rmt_delete_link()): ALL ends the
 * link group; one link goes down as if it had failed here, its
 * connections moving to another link if one is up (else the link group
 * ends), and the peer gets its answer, NOLNK for a link we do not have.
 */
static void delete_link_rx(struct lgr *lgr, int slot, struct llc_msg *m)
{
	struct smcr_link *lnk;

	if (m->flags & LLC_FLAG_DEL_LINK_ALL) {
		lgr_terminate(lgr, -ECONNABORTED, false);
		return;
	}
	lnk = lgr_link_by_num(lgr, m->delete_link.link_num);
	if (lnk)
		lnk->up.h->error(lnk, -ECONNRESET, false);
	if (atomic_load(&lgr->state) != LGR_ACTIVE)
		return; /* nobody left to answer on */
	llc_make_response(m);
	if (!lnk)
		m->delete_link.reason = LLC_DEL_NOLNK;
	smcr_llc_answer(lgr, slot, m);
}

void smcr_llc_rx(struct lgr *lgr, int slot, const uint8_t *buf, uint32_t len)
{
	static _Thread_local struct llc_msg m; /* large (ADD_LINK rkeys): not on the stack */

	atomic_fetch_add_explicit(&lgr->sctx->llc_received, 1, memory_order_relaxed);
	if (llc_decode(buf, len, &m)) {
		usmc_log(lgr->sctx->log, USMC_LOG_WARN,
			 "link group %x: malformed LLC message dropped (%u bytes)", lgr->id, len);
		return; /* Linux drops malformed LLC silently */
	}
	if (m.flags & LLC_FLAG_RESP) {
		uint32_t gen = barrier_of(&m);

		if (m.type == LLC_TEST_LINK && slot >= 0 && slot < SMCR_LINKS_MAX)
			lgr->lnk[slot].tl_sent_ms = 0;
		if (gen)
			lgr->ops->barrier(lgr, gen);
		else
			smcr_llc_deliver_resp(lgr, &m, buf, len);
		return;
	}
	switch (m.type) {
	case LLC_CONFIRM_LINK:
		smcr_llc_deliver_confirm_link(lgr, &m);
		break;
	case LLC_DELETE_LINK:
		delete_link_rx(lgr, slot, &m);
		break;
	default:
		/* a flow of the peer's (CONFIRM_RKEY, DELETE_RKEY): more may follow */
		smcr_eng_churn(&lgr->eng);
		answer(lgr, slot, &m);
	}
}

/* ---- keepalive ------------------------------------------------------- */

/* TEST_LINK on @lnk when it has been quiet for the interval (or @now_asked),
 * and its failure when the last one went unanswered. */
static void link_tick(struct lgr *lgr, struct smcr_link *lnk, long now, bool now_asked)
{
	struct llc_msg m = {.version = LLC_V2, .type = LLC_TEST_LINK};
	long sent = atomic_load(&lnk->tl_sent_ms);

	if (sent && !smcr_llc_answer_waits(now, sent, atomic_load(&lnk->last_rx_ms))) {
		/* TEST_LINK unanswered, the peer silent on that link: it failed
		 * (its connections move if another link is up) */
		usmc_log(lgr->sctx->log, USMC_LOG_INFO,
			 "link group %x: link %u: TEST_LINK unanswered for %ld ms, nothing "
			 "received for %ld ms",
			 lgr->id, lnk->link_num, now - sent, now - atomic_load(&lnk->last_rx_ms));
		lnk->tl_sent_ms = 0;
		lnk->up.h->error(lnk, -ETIMEDOUT, false);
		return;
	}
	if (!sent &&
	    (now_asked || (lgr->cfg.testlink_ms && now - lnk->last_rx_ms > lgr->cfg.testlink_ms))) {
		if (!smcr_llc_send_on(lgr, lnk, &m)) {
			atomic_fetch_add(&lgr->llc.test_link_sent, 1);
			lnk->tl_sent_ms = now;
		}
	}
}

void smcr_llc_tick(struct lgr *lgr, long now)
{
	bool now_asked = atomic_exchange(&lgr->llc.test_now, false);

	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		if (atomic_load(&lgr->state) != LGR_ACTIVE)
			return; /* the last link failed: the link group went with it */
		if (atomic_load(&lgr->lnk[i].state) == SMCR_LNK_ACTIVE)
			link_tick(lgr, &lgr->lnk[i], now, now_asked);
	}
}
