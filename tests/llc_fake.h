/* SPDX-License-Identifier: MIT */
/*
 * A link group of one active link built by hand around fakes of the verbs
 * calls its LLC send path makes, for the unit tests of smcr_llc*.c: the
 * QP's post_send records what was sent (sent[], nsent), the send CQ's
 * poll_cq hands back the completions a test asks for (completions),
 * peer_asks() delivers a message of the peer's through the link's own
 * receive handler. No device.
 */
#ifndef USMC_TEST_LLC_FAKE_H
#define USMC_TEST_LLC_FAKE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cmocka.h>

#include "lgr.h"
#include "llc.h"
#include "smcr_llc.h"
#include "smcr_wr.h"

#define SENT_MAX 512 /* more than SMCR_LLC_FLOW_SLOTS */

static uint8_t sent[SENT_MAX][LLC_MSG_LEN];
static int nsent;
static int completions; /* the send CQ's next poll returns this many */
static int kicks;	/* lgr_conn_ops.kick_pending calls */

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)qp;
	(void)bad;
	assert_true(nsent < SENT_MAX);
	assert_int_equal(wr->sg_list[0].length, LLC_MSG_LEN);
	memcpy(sent[nsent++], (const void *)(uintptr_t)wr->sg_list[0].addr, LLC_MSG_LEN);
	return 0;
}

static struct ibv_cq fake_rcq, fake_scq;

static int fake_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
	int n = 0;

	if (cq != &fake_scq)
		return 0;
	while (n < num && completions > 0) {
		wc[n++] = (struct ibv_wc){.status = IBV_WC_SUCCESS, .opcode = IBV_WC_SEND};
		completions--;
	}
	return n;
}

static void fake_kick_pending(struct lgr *lgr)
{
	(void)lgr;
	kicks++;
}

static const struct lgr_conn_ops fake_ops = {.kick_pending = fake_kick_pending};

struct fake {
	struct smcr_ctx sctx;
	struct ibv_context ib;
	struct ibv_qp qp;
	struct lgr *lgr;
	struct smcr_link *lnk;
};

/* An active link group of one link whose send queue holds @used sends. */
static void fake_open(struct fake *f, int used)
{
	const struct smcr_dev dev = {0};
	struct smcr_tx_pend p = {0};
	struct smcr_link *lnk;

	memset(f, 0, sizeof(*f));
	f->ib.ops.post_send = fake_post_send;
	f->ib.ops.poll_cq = fake_poll_cq;
	f->qp.context = &f->ib;
	fake_rcq.context = fake_scq.context = &f->ib;
	f->lgr = calloc(1, sizeof(*f->lgr));
	assert_non_null(f->lgr);
	f->lgr->sctx = &f->sctx;
	f->lgr->ops = &fake_ops;
	f->lgr->state = LGR_ACTIVE;
	smcr_llc_init(&f->lgr->llc);
	lgr_rtoken_init(&f->lgr->rtok); /* the peer's CONFIRM_RKEY lands there */
	/* the engine's wake-up, which a peer's request asks for */
	pthread_mutex_init(&f->lgr->eng.lock, NULL);
	f->lgr->eng.set.progress_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	assert_true(f->lgr->eng.set.progress_fd >= 0);
	lgr_link_init(f->lgr, &dev);
	lnk = f->lnk = lgr_conn_link(f->lgr);
	f->lgr->eng.set.lnk = lnk;
	lnk->state = SMCR_LNK_ACTIVE;
	lnk->qp = &f->qp;
	lnk->rcq = &fake_rcq;
	lnk->scq = &fake_scq;
	for (int i = 0; i < used; i++)
		smcr_sq_push_locked(&lnk->sq, &p, 1);
	nsent = completions = kicks = 0;
}

static void fake_close(struct fake *f)
{
	close(f->lgr->eng.set.progress_fd);
	pthread_mutex_destroy(&f->lgr->eng.lock);
	pthread_mutex_destroy(&f->lnk->sq.lock);
	smcr_llc_fini(&f->lgr->llc);
	lgr_rtoken_fini(&f->lgr->rtok);
	free(f->lgr);
}

/* The peer's request @m arrives on the link. */
static void peer_asks(struct fake *f, const struct llc_msg *m)
{
	uint8_t buf[LLC_MSG_LEN];

	assert_int_equal(llc_encode(m, buf, sizeof(buf)), LLC_MSG_LEN);
	f->lnk->up.h->rx_llc(f->lnk, buf, sizeof(buf));
}

#endif
