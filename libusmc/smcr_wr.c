// SPDX-License-Identifier: MIT
/*
 * Work requests of a link's QP (smcr_wr.h), as net/smc/smc_wr.c: receive
 * buffers reposted at once (there is no credit scheme for SENDs), a send
 * queue split so that LLC always finds room, and completions handed to
 * the link's handlers in posting order.
 */
#include <errno.h>
#include <stdlib.h>

#include "cdc.h"
#include "clock.h"
#include "log.h"
#include "smcr_wr.h"

#define WR_RX_TAG   (1ull << 63) /* wr_id of a receive: tag | buffer index */
#define WR_CQ_BATCH 16

/* ---- receive --------------------------------------------------------- */

static int post_recv(struct smcr_link *lnk, uint32_t idx)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(lnk->rx_bufs + (size_t)idx * SMCR_RX_BUF_LEN),
		.length = SMCR_RX_BUF_LEN,
		.lkey = lnk->rx_mr->lkey,
	};
	struct ibv_recv_wr wr = {.wr_id = WR_RX_TAG | idx, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad;

	return -ibv_post_recv(lnk->qp, &wr, &bad);
}

int smcr_wr_rx_setup(struct smcr_link *lnk)
{
	/* and one more buffer behind the receives: the long LLC send's */
	size_t len = (size_t)(SMCR_RX_WRS + 1) * SMCR_RX_BUF_LEN;
	int rc;

	lnk->rx_bufs = aligned_alloc(4096, len);
	if (!lnk->rx_bufs)
		return -ENOMEM;
	lnk->rx_mr = ibv_reg_mr(lnk->pd, lnk->rx_bufs, len, IBV_ACCESS_LOCAL_WRITE);
	if (!lnk->rx_mr)
		return errno ? -errno : -ENOMEM;
	/* receives may be posted in INIT; they must be there before RTR */
	for (uint32_t i = 0; i < SMCR_RX_WRS; i++) {
		rc = post_recv(lnk, i);
		if (rc)
			return rc;
	}
	return 0;
}

uint8_t *smcr_wr_long_buf(struct smcr_link *lnk, uint32_t *lkey)
{
	*lkey = lnk->rx_mr->lkey;
	return lnk->rx_bufs + (size_t)SMCR_RX_WRS * SMCR_RX_BUF_LEN;
}

void smcr_wr_rx_free(struct smcr_link *lnk)
{
	if (lnk->rx_mr)
		ibv_dereg_mr(lnk->rx_mr);
	free(lnk->rx_bufs);
}

/* A receive completed: hand the message to its handler by its first byte
 * (the one type CDC has, else LLC), repost the buffer. */
static void rx_done(struct smcr_link *lnk, const struct ibv_wc *wc)
{
	const struct smcr_link_handlers *h = lnk->up.h;
	uint32_t idx = (uint32_t)(wc->wr_id & ~WR_RX_TAG);
	const uint8_t *buf;

	if (wc->status != IBV_WC_SUCCESS || idx >= SMCR_RX_WRS)
		return;
	/* SMC-R peers only SEND to us: a WRITE with immediate consumed a
	 * receive without filling its buffer, which holds a stale message */
	if (wc->opcode != IBV_WC_RECV) {
		h->error(lnk, -EPROTO, true);
		return;
	}
	buf = lnk->rx_bufs + (size_t)idx * SMCR_RX_BUF_LEN;
	lnk->last_rx_ms = clock_now_ms();
	if (wc->byte_len >= 1 && buf[0] == CDC_MSG_TYPE)
		h->rx_cdc(lnk, buf, wc->byte_len);
	else
		h->rx_llc(lnk, buf, wc->byte_len);
	if (post_recv(lnk, idx))
		h->error(lnk, -ECONNABORTED, false);
}

/* ---- send ------------------------------------------------------------ */

static int sq_limit(enum smcr_sq_class cls)
{
	return cls == SMCR_SQ_CDC ? SMCR_TX_CDC_WRS : SMCR_MAX_SEND_WR;
}

int smcr_wr_post_send(struct smcr_link *lnk, struct ibv_send_wr *wr, int n,
		      const struct smcr_tx_pend *p, enum smcr_sq_class cls)
{
	struct smcr_sq *sq = &lnk->sq;
	struct ibv_send_wr *bad;
	int rc = 0;

	pthread_mutex_lock(&sq->lock);
	if (atomic_load(&lnk->state) == SMCR_LNK_INACTIVE && cls != SMCR_SQ_LLC_FORCE)
		rc = -ECONNABORTED;
	else if (sq->used + n > sq_limit(cls))
		rc = -EAGAIN;
	/*
	 * Marked here, under the lock completions are popped under: each pop
	 * after it is followed by a kick that sees the mark, and a full queue
	 * has a pop to come. Marked by the caller after the refusal, the mark
	 * could come after the last send in flight had completed and kicked:
	 * nothing kicked again, and the data stayed in the send buffer.
	 */
	if (rc == -EAGAIN)
		atomic_store(&lnk->any_pending, true);
	if (!rc) {
		rc = -ibv_post_send(lnk->qp, wr, &bad);
		eng_count(lnk->up.st, ENG_DOORBELLS, 1);
		eng_count(lnk->up.st, ENG_SYSCALLS, 1); /* rxe: the doorbell is a write() */
	}
	if (!rc)
		smcr_sq_push_locked(sq, p, n);
	pthread_mutex_unlock(&sq->lock);
	return rc;
}

void smcr_sq_push_locked(struct smcr_sq *sq, const struct smcr_tx_pend *p, int n)
{
	struct smcr_tx_pend *slot = &sq->pend[sq->head++ % SMCR_MAX_SEND_WR];

	*slot = *p;
	slot->nwr = (uint16_t)n;
	sq->used += n;
}

bool smcr_sq_pop_locked(struct smcr_sq *sq, struct smcr_tx_pend *p)
{
	if (sq->tail == sq->head)
		return false;
	*p = sq->pend[sq->tail++ % SMCR_MAX_SEND_WR];
	sq->used -= p->nwr;
	return true;
}

bool smcr_wr_stalled(struct smcr_link *lnk, long now_ms)
{
	struct smcr_sq *sq = &lnk->sq;
	bool stalled;

	/* the timer's own watch: no clock read on the send path */
	pthread_mutex_lock(&sq->lock);
	if (!sq->used || !sq->watching || sq->tail != sq->watch_tail) {
		sq->watching = sq->used;
		sq->watch_tail = sq->tail;
		sq->watch_since_ms = now_ms;
	}
	stalled = sq->watching && now_ms - sq->watch_since_ms > SMCR_SQ_STALL_MS;
	pthread_mutex_unlock(&sq->lock);
	return stalled;
}

/* A signaled send completed: its entries (and the unsignaled ones before it) are free. */
bool smcr_wr_send_done(struct smcr_link *lnk, struct smcr_tx_pend *p)
{
	bool ok;

	pthread_mutex_lock(&lnk->sq.lock);
	ok = smcr_sq_pop_locked(&lnk->sq, p);
	pthread_mutex_unlock(&lnk->sq.lock);
	return ok;
}

int smcr_wr_sq_used(struct smcr_link *lnk)
{
	int used;

	pthread_mutex_lock(&lnk->sq.lock);
	used = lnk->sq.used;
	pthread_mutex_unlock(&lnk->sq.lock);
	return used;
}

/* ---- completion queue ------------------------------------------------ */

/* Hand @n completions of one CQ to the handlers; true if a send completed. */
static bool wr_dispatch(struct smcr_link *lnk, struct ibv_wc *wc, int n)
{
	bool sent = false;

	for (int i = 0; i < n; i++) {
		struct smcr_tx_pend p;

		if (wc[i].status != IBV_WC_SUCCESS &&
		    atomic_load(&lnk->state) != SMCR_LNK_INACTIVE) {
			usmc_log(lnk->up.log, USMC_LOG_INFO,
				 "link group %x: a %s work request failed: %s", lnk->up.lgr_id,
				 (wc[i].wr_id & WR_RX_TAG) ? "receive" : "send",
				 ibv_wc_status_str(wc[i].status));
			lnk->up.h->error(lnk, -ECONNABORTED, false);
		}
		if (wc[i].wr_id & WR_RX_TAG) {
			rx_done(lnk, &wc[i]);
		} else if (smcr_wr_send_done(lnk, &p)) {
			p.failed = wc[i].status != IBV_WC_SUCCESS;
			sent = true;
			if (p.conn)
				lnk->up.h->tx_done(lnk, &p);
		}
	}
	return sent;
}

int smcr_wr_poll(struct smcr_link *lnk)
{
	struct ibv_wc wc[WR_CQ_BATCH];
	int n, total = 0;
	bool sent = false;

	n = ibv_poll_cq(lnk->rcq, WR_CQ_BATCH, wc);
	if (n > 0) {
		wr_dispatch(lnk, wc, n);
		total += n;
	}
	n = ibv_poll_cq(lnk->scq, WR_CQ_BATCH, wc);
	if (n > 0) {
		sent = wr_dispatch(lnk, wc, n);
		total += n;
	}
	/* room came back: whoever found none may send now */
	if (sent && atomic_exchange(&lnk->any_pending, false))
		lnk->up.h->sq_room(lnk);
	if (total)
		eng_count(lnk->up.st, ENG_CQES, (uint64_t)total);
	return total;
}

int smcr_wr_drain_cq(struct smcr_link *lnk)
{
	int n, total = 0;

	while ((n = smcr_wr_poll(lnk)) > 0)
		total += n;
	return total;
}
