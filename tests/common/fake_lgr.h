/* SPDX-License-Identifier: MIT */
/*
 * A link group of one ACTIVE link built by hand around fakes of the verbs
 * calls, for unit tests of what a connection or the LLC sends: the QP's
 * post_send records the first 44 bytes (one LLC or CDC message) of each
 * post's first entry in fake_sent[] (and the QP in fake_sent_qp[]), the
 * send CQ completes the sends a test asks for (fake_completions; the
 * receive CQ nothing), fake_peer_sends() delivers a message of the peer's
 * through the link's own receive handler, the connections' kicks are
 * counted (fake_kicks), and the pools register through a hook that hands
 * out a new pair of keys each time (fake_regs, fake_deregs count them).
 * No device.
 */
#ifndef USMC_TEST_FAKE_LGR_H
#define USMC_TEST_FAKE_LGR_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "bufpool.h"
#include "lgr.h"
#include "lgr_int.h"
#include "llc.h"
#include "smcr_conn.h"
#include "smcr_llc.h"
#include "smcr_wr.h"

#define FAKE_SENT_MAX 512 /* more than SMCR_LLC_FLOW_SLOTS */
#define FAKE_KEY_BASE 0x5000u

static uint8_t fake_sent[FAKE_SENT_MAX][LLC_MSG_LEN];
static struct ibv_qp *fake_sent_qp[FAKE_SENT_MAX];
static int fake_nsent;
static int fake_completions; /* the send CQ's next polls return this many */
static int fake_kicks;	     /* lgr_conn_ops.kick_pending calls */

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)bad;
	assert_true(fake_nsent < FAKE_SENT_MAX);
	fake_sent_qp[fake_nsent] = qp;
	memcpy(fake_sent[fake_nsent++], (const void *)(uintptr_t)wr->sg_list[0].addr, LLC_MSG_LEN);
	return 0;
}

static struct ibv_cq fake_rcq, fake_scq;

static int fake_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
	int n = 0;

	if (cq != &fake_scq)
		return 0;
	while (n < num && fake_completions > 0) {
		wc[n++] = (struct ibv_wc){.status = IBV_WC_SUCCESS, .opcode = IBV_WC_SEND};
		fake_completions--;
	}
	return n;
}

/* The connections' operations, their kicks counted. */
static struct lgr_conn_ops fake_ops;

static void fake_kick_pending(struct lgr *lgr)
{
	fake_kicks++;
	smcr_conn_lgr_ops.kick_pending(lgr);
}

/* The pool's registrations: each a new pair of keys. */
static uint32_t next_key;
static unsigned int fake_regs, fake_deregs;

static int fake_reg(void *ctx, void *addr, size_t len, unsigned int access, struct bufpool_mr *mr)
{
	(void)ctx;
	(void)len;
	(void)access;
	fake_regs++;
	mr->handle = addr;
	mr->lkey = FAKE_KEY_BASE + next_key++;
	mr->rkey = FAKE_KEY_BASE + next_key++;
	return 0;
}

static int fake_dereg(void *ctx, struct bufpool_mr *mr)
{
	(void)ctx;
	(void)mr;
	fake_deregs++;
	return 0;
}

static const struct bufpool_reg_ops fake_reg_ops = {.reg = fake_reg, .dereg = fake_dereg};

struct fake {
	struct smcr_ctx sctx;
	struct ibv_context ib;
	struct ibv_qp qp;
	struct lgr *lgr;
	struct smcr_link *lnk; /* its first link */
	uint8_t added;	       /* the slots fake_add_link() filled, a bit each */
};

/* An active link group of one link, its pools on the fake hook. */
static void fake_open(struct fake *f)
{
	const struct smcr_dev dev = {0};
	struct bufpool_config cfg = {.kind = BUFPOOL_RMB, .ops = &fake_reg_ops};
	struct smcr_link *lnk;
	struct lgr *lgr;

	memset(f, 0, sizeof(*f));
	f->ib.ops.post_send = fake_post_send;
	f->ib.ops.poll_cq = fake_poll_cq;
	f->qp.context = &f->ib;
	fake_rcq.context = fake_scq.context = &f->ib;
	lgr = f->lgr = calloc(1, sizeof(*f->lgr));
	assert_non_null(lgr);
	lgr->sctx = &f->sctx;
	fake_ops = smcr_conn_lgr_ops;
	fake_ops.kick_pending = fake_kick_pending;
	lgr->ops = &fake_ops;
	lgr->state = LGR_ACTIVE;
	lgr->max_conns = SMCR_MAX_CONNS;
	pthread_mutex_init(&lgr->lock, NULL);
	smcr_llc_init(&lgr->llc);
	lgr_rtoken_init(&lgr->rtok);
	pthread_mutex_init(&lgr->eng.lock, NULL);
	lgr->eng.set.progress_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	assert_true(lgr->eng.set.progress_fd >= 0);
	lgr_link_init(lgr, &dev);
	lnk = f->lnk = lgr_conn_link(lgr);
	lgr->eng.set.lnk = lnk;
	lnk->state = SMCR_LNK_ACTIVE;
	lnk->qp = &f->qp;
	lnk->rcq = &fake_rcq;
	lnk->scq = &fake_scq;
	lnk->max_inline = SMCR_MAX_INLINE; /* as the QP grants: a 44-byte message goes inline */
	lgr->rmbs = bufpool_create(&cfg);
	cfg.kind = BUFPOOL_SNDBUF;
	lgr->sndbufs = bufpool_create(&cfg);
	assert_non_null(lgr->rmbs);
	assert_non_null(lgr->sndbufs);
	fake_nsent = fake_completions = fake_kicks = 0;
	fake_regs = fake_deregs = 0;
}

/* The first link's send queue holds @used sends that have not completed. */
static inline void fake_fill_sq(struct fake *f, int used)
{
	struct smcr_tx_pend p = {0};

	for (int i = 0; i < used; i++)
		smcr_sq_push_locked(&f->lnk->sq, &p, 1);
}

/* The peer's message @m arrives on the first link. */
static inline void fake_peer_sends(struct fake *f, const struct llc_msg *m)
{
	uint8_t buf[LLC_MSG_LEN];

	assert_int_equal(llc_encode(m, buf, sizeof(buf)), LLC_MSG_LEN);
	f->lnk->up.h->rx_llc(f->lnk, buf, sizeof(buf));
}

/* One more ACTIVE link, in slot @slot, on @qp (its own QP, or the first
 * link's: fake_sent_qp[] tells them apart). */
static inline void fake_add_link(struct fake *f, int slot, struct ibv_qp *qp)
{
	const struct smcr_dev dev = {0};
	struct smcr_link *lnk = &f->lgr->lnk[slot];

	lgr_link_init_slot(f->lgr, slot, &dev);
	qp->context = &f->ib;
	lnk->state = SMCR_LNK_ACTIVE;
	lnk->qp = qp;
	lnk->rcq = &fake_rcq;
	lnk->scq = &fake_scq;
	lnk->max_inline = SMCR_MAX_INLINE;
	f->added |= (uint8_t)(1u << slot);
}

static void fake_close(struct fake *f)
{
	struct lgr *lgr = f->lgr;

	assert_int_equal(atomic_load(&lgr->refs), 0); /* every connection gone */
	assert_int_equal(bufpool_destroy(lgr->rmbs, NULL), 0);
	assert_int_equal(bufpool_destroy(lgr->sndbufs, NULL), 0);
	close(lgr->eng.set.progress_fd);
	pthread_mutex_destroy(&lgr->eng.lock);
	pthread_mutex_destroy(&lgr_conn_link(lgr)->sq.lock);
	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		if (f->added & (1u << i))
			pthread_mutex_destroy(&lgr->lnk[i].sq.lock);
	smcr_llc_fini(&lgr->llc);
	lgr_rtoken_fini(&lgr->rtok);
	pthread_mutex_destroy(&lgr->lock);
	free(lgr);
}

#endif
