// SPDX-License-Identifier: MIT
/*
 * Flows run as events (smcr_llc_flow_start()): one runs at a time, as
 * Linux's; those started meanwhile wait in order, and each answer sends the
 * next request at once, before the answered flow's owner comes back for it
 * (a storm's first connections each confirm a new RMB's rkey: their
 * owners, handshakes parked until a worker is free, came back one after
 * another, and the flows with them). On the fake link of common/fake_lgr.h.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "clock.h"
#include "llc.h"
#include "smcr_llc.h"
#include "smcr_wr.h"

#include "common/fake_lgr.h"

static struct llc_msg rkey_request(uint32_t rkey)
{
	struct llc_msg m = {.version = LLC_V2, .type = LLC_CONFIRM_RKEY};

	m.confirm_rkey.rkey = rkey;
	return m;
}

/* The @i-th message sent: our CONFIRM_RKEY request; returns its rkey. */
static uint32_t sent_rkey_request(int i)
{
	struct llc_msg m;

	assert_true(i < fake_nsent);
	assert_int_equal(llc_decode(fake_sent[i], LLC_MSG_LEN, &m), 0);
	assert_int_equal(m.type, LLC_CONFIRM_RKEY);
	assert_false(m.flags & LLC_FLAG_RESP);
	return m.confirm_rkey.rkey;
}

/* The peer answers the CONFIRM_RKEY that is on the wire. */
static void peer_answers(struct fake *f)
{
	struct llc_msg m = rkey_request(0);

	m.flags = LLC_FLAG_RESP;
	fake_peer_sends(f, &m);
}

static uint32_t start(struct fake *f, uint32_t rkey)
{
	struct llc_msg req = rkey_request(rkey);
	uint32_t ticket = 0;

	assert_int_equal(smcr_llc_flow_start(f->lgr, &req, &ticket), 0);
	assert_int_not_equal(ticket, 0);
	return ticket;
}

static int result(struct fake *f, uint32_t ticket, long due_ms)
{
	struct llc_msg resp;
	int rc = smcr_llc_flow_result(f->lgr, ticket, due_ms, &resp);

	if (!rc) {
		assert_int_equal(resp.type, LLC_CONFIRM_RKEY);
		assert_true(resp.flags & LLC_FLAG_RESP);
	}
	return rc;
}

#define LATER (clock_now_ms() + 60000)

/* Started while another runs: queued, sent when the answer before it
 * arrives, in the order they were started. */
static void test_answer_sends_next(void **state)
{
	struct fake f;
	uint32_t a, b, c, d;

	(void)state;
	fake_open(&f);
	a = start(&f, 1);
	b = start(&f, 2);
	c = start(&f, 3);
	assert_int_equal(fake_nsent, 1); /* one flow at a time */
	assert_int_equal(sent_rkey_request(0), 1);
	assert_int_equal(result(&f, b, LATER), -EAGAIN);
	assert_false(smcr_llc_flow_settled(f.lgr, a));
	peer_answers(&f);
	/* the next request left with the answer, a's owner not back yet */
	assert_int_equal(fake_nsent, 2);
	assert_int_equal(sent_rkey_request(1), 2);
	assert_true(smcr_llc_flow_settled(f.lgr, a));
	assert_false(smcr_llc_flow_settled(f.lgr, b));
	assert_int_equal(result(&f, a, LATER), 0);
	assert_int_equal(result(&f, a, LATER), -ECONNABORTED); /* taken */
	peer_answers(&f);
	assert_int_equal(fake_nsent, 3);
	assert_int_equal(sent_rkey_request(2), 3);
	/* c's owner goes away: the flow is free for the next at once */
	smcr_llc_flow_abandon(f.lgr, c);
	d = start(&f, 4);
	assert_int_equal(fake_nsent, 4);
	assert_int_equal(sent_rkey_request(3), 4);
	assert_int_equal(result(&f, b, LATER), 0);
	peer_answers(&f);
	assert_int_equal(result(&f, d, LATER), 0);
	assert_int_equal(fake_nsent, 4);
	fake_close(&f);
}

/* A waiting flow past its owner's time goes without being sent; a running
 * one past it frees the flow for the next. */
static void test_due_passed(void **state)
{
	struct fake f;
	uint32_t a, b, c;

	(void)state;
	fake_open(&f);
	a = start(&f, 1);
	b = start(&f, 2);
	c = start(&f, 3);
	assert_int_equal(result(&f, b, clock_now_ms()), -ETIMEDOUT);
	assert_int_equal(fake_nsent, 1);
	assert_int_equal(result(&f, a, clock_now_ms()), -ETIMEDOUT);
	assert_int_equal(fake_nsent, 2); /* c's, not b's */
	assert_int_equal(sent_rkey_request(1), 3);
	peer_answers(&f);
	assert_int_equal(result(&f, c, LATER), 0);
	fake_close(&f);
}

/* A parked owner looks again when its flow would end by itself: the
 * running one SMCR_LLC_WAIT_MS after its request left (an answer that never
 * comes), a waiting one at its owner's time. */
static void test_flow_due(void **state)
{
	struct fake f;
	uint32_t a, b;
	long later = LATER, now;

	(void)state;
	fake_open(&f);
	now = clock_now_ms();
	a = start(&f, 1);
	b = start(&f, 2);
	assert_in_range(smcr_llc_flow_due(f.lgr, a, later), now + SMCR_LLC_WAIT_MS,
			clock_now_ms() + SMCR_LLC_WAIT_MS);
	assert_int_equal(smcr_llc_flow_due(f.lgr, a, now), now); /* the owner's is sooner */
	assert_int_equal(smcr_llc_flow_due(f.lgr, b, later), later);
	smcr_llc_flow_abandon(f.lgr, a);
	smcr_llc_flow_abandon(f.lgr, b);
	fake_close(&f);
}

/* At most SMCR_LLC_FLOW_SLOTS flows started or waiting: the next is told
 * to ask again, and told (a handshake event) when a slot comes back, even
 * by a flow that never ran: nothing else would wake its owner. */
static void test_slots_bounded(void **state)
{
	struct llc_msg req = rkey_request(9);
	uint32_t tickets[SMCR_LLC_FLOW_SLOTS], t = 0;
	unsigned int events;
	struct fake f;

	(void)state;
	fake_open(&f);
	for (int i = 0; i < SMCR_LLC_FLOW_SLOTS; i++)
		tickets[i] = start(&f, (uint32_t)i);
	assert_int_equal(smcr_llc_flow_start(f.lgr, &req, &t), -EBUSY);
	/* a waiting flow's result frees its slot: the refused are told */
	events = atomic_load(&f.sctx.hs_events);
	assert_int_equal(result(&f, tickets[SMCR_LLC_FLOW_SLOTS - 1], clock_now_ms()), -ETIMEDOUT);
	assert_int_equal(atomic_load(&f.sctx.hs_events), events + 1);
	assert_int_equal(smcr_llc_flow_start(f.lgr, &req, &t), 0);
	for (int i = 0; i < SMCR_LLC_FLOW_SLOTS - 1; i++)
		smcr_llc_flow_abandon(f.lgr, tickets[i]);
	smcr_llc_flow_abandon(f.lgr, t);
	assert_int_equal(fake_nsent, SMCR_LLC_FLOW_SLOTS); /* each ran when the one before went */
	fake_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_answer_sends_next),
		cmocka_unit_test(test_due_passed),
		cmocka_unit_test(test_flow_due),
		cmocka_unit_test(test_slots_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
