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

#include <cmocka.h>

#include "llc.h"
#include "smcr_llc.h"
#include "smcr_wr.h"

#include "common/fake_lgr.h"

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

	assert_int_equal(llc_decode(fake_sent[i], LLC_MSG_LEN, &m), 0);
	assert_int_equal(m.type, type);
	assert_true(m.flags & LLC_FLAG_RESP);
	return m;
}

/* @n sends complete: the link's completion path runs, as the engine's
 * token holder runs it. */
static void sends_complete(struct fake *f, int n)
{
	fake_completions = n;
	smcr_wr_drain_cq(f->lnk);
	assert_int_equal(fake_completions, 0);
}

/* A full send queue: the answers wait, then go in order as room comes. */
static void test_answers_wait_for_room(void **state)
{
	struct fake f;
	struct llc_msg m;

	(void)state;
	fake_open(&f);
	fake_fill_sq(&f, SMCR_MAX_SEND_WR);
	m = test_link(7);
	fake_peer_sends(&f, &m);
	m = confirm_rkey(0x1234);
	fake_peer_sends(&f, &m);
	assert_int_equal(fake_nsent, 0);
	assert_true(atomic_load(&f.lnk->any_pending));
	/* one entry comes back: the oldest answer takes it */
	sends_complete(&f, 1);
	assert_int_equal(fake_nsent, 1);
	assert_int_equal(sent_answer(0, LLC_TEST_LINK).test_link.user_data[0], 7);
	assert_int_equal(fake_kicks, 1); /* the connections' sends are kicked too */
	/* the next: the second, and nothing is owed any more */
	sends_complete(&f, 1);
	assert_int_equal(fake_nsent, 2);
	assert_int_equal(sent_answer(1, LLC_CONFIRM_RKEY).confirm_rkey.rkey, 0x1234);
	sends_complete(&f, 4);
	assert_int_equal(fake_nsent, 2);
	assert_int_equal(atomic_load(&f.lgr->llc.answers_owed), 2);
	/* with room, an answer goes at once */
	m = test_link(9);
	fake_peer_sends(&f, &m);
	assert_int_equal(fake_nsent, 3);
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
	fake_open(&f);
	fake_fill_sq(&f, SMCR_MAX_SEND_WR);
	for (int i = 0; i < SMCR_LLC_OWED + 3; i++) {
		m = test_link((uint8_t)i);
		fake_peer_sends(&f, &m);
	}
	assert_int_equal(fake_nsent, 0);
	sends_complete(&f, SMCR_MAX_SEND_WR);
	assert_int_equal(fake_nsent, SMCR_LLC_OWED);
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
