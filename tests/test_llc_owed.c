// SPDX-License-Identifier: MIT
/*
 * An answer to the peer's LLC request that finds the send queue full is
 * kept and sent, in order, when a send completion makes room; beyond
 * SMCR_LLC_OWED it is lost and counted. No device: a link group built by
 * hand around fakes of the verbs calls its send path makes (the QP's
 * post_send records what was sent, the CQs' poll_cq hands back the
 * completions the test says), driven through the link's own handlers.
 */
#include <errno.h>
#include <pthread.h>
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

#define SENT_MAX 64

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

static struct llc_msg test_link(uint8_t tag)
{
	struct llc_msg m = {.version = LLC_V2, .type = LLC_TEST_LINK};

	m.test_link.user_data[0] = tag;
	return m;
}

static struct llc_msg confirm_rkey(uint32_t rkey)
{
	struct llc_msg m = {.version = LLC_V2, .type = LLC_CONFIRM_RKEY};

	m.confirm_rkey.rkey = rkey;
	return m;
}

/* The @i-th message sent, decoded: an answer of @type. */
static struct llc_msg sent_answer(int i, uint8_t type)
{
	struct llc_msg m;

	assert_int_equal(llc_decode(sent[i], LLC_MSG_LEN, &m), 0);
	assert_int_equal(m.type, type);
	assert_true(m.flags & LLC_FLAG_RESP);
	return m;
}

/* @n sends complete: the link's completion path runs, as the engine's
 * token holder runs it. */
static void sends_complete(struct fake *f, int n)
{
	completions = n;
	smcr_wr_drain_cq(f->lnk);
	assert_int_equal(completions, 0);
}

/* A full send queue: the answers wait, then go in order as room comes. */
static void test_answers_wait_for_room(void **state)
{
	struct fake f;
	struct llc_msg m;

	(void)state;
	fake_open(&f, SMCR_MAX_SEND_WR);
	m = test_link(7);
	peer_asks(&f, &m);
	m = confirm_rkey(0x1234);
	peer_asks(&f, &m);
	assert_int_equal(nsent, 0);
	assert_true(atomic_load(&f.lnk->any_pending));
	/* one entry comes back: the oldest answer takes it */
	sends_complete(&f, 1);
	assert_int_equal(nsent, 1);
	assert_int_equal(sent_answer(0, LLC_TEST_LINK).test_link.user_data[0], 7);
	assert_int_equal(kicks, 1); /* the connections' sends are kicked too */
	/* the next: the second, and nothing is owed any more */
	sends_complete(&f, 1);
	assert_int_equal(nsent, 2);
	assert_int_equal(sent_answer(1, LLC_CONFIRM_RKEY).confirm_rkey.rkey, 0x1234);
	sends_complete(&f, 4);
	assert_int_equal(nsent, 2);
	assert_int_equal(atomic_load(&f.lgr->llc.answers_owed), 2);
	/* with room, an answer goes at once */
	m = test_link(9);
	peer_asks(&f, &m);
	assert_int_equal(nsent, 3);
	assert_int_equal(sent_answer(2, LLC_TEST_LINK).test_link.user_data[0], 9);
	assert_int_equal(atomic_load(&f.lgr->llc.answers_lost), 0);
	fake_close(&f);
}

/* A peer that asks more than SMCR_LLC_OWED while the queue is full gets
 * the first SMCR_LLC_OWED answers, in order, and no more kept. */
static void test_answers_owed_bounded(void **state)
{
	struct fake f;
	struct llc_msg m;

	(void)state;
	fake_open(&f, SMCR_MAX_SEND_WR);
	for (int i = 0; i < SMCR_LLC_OWED + 3; i++) {
		m = test_link((uint8_t)i);
		peer_asks(&f, &m);
	}
	assert_int_equal(nsent, 0);
	sends_complete(&f, SMCR_MAX_SEND_WR);
	assert_int_equal(nsent, SMCR_LLC_OWED);
	assert_int_equal(atomic_load(&f.lgr->llc.answers_owed), SMCR_LLC_OWED);
	assert_int_equal(atomic_load(&f.lgr->llc.answers_lost), 3);
	for (int i = 0; i < SMCR_LLC_OWED; i++)
		assert_int_equal(sent_answer(i, LLC_TEST_LINK).test_link.user_data[0], i);
	fake_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_answers_wait_for_room),
		cmocka_unit_test(test_answers_owed_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
