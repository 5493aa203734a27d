// SPDX-License-Identifier: MIT
/*
 * A received CDC applied to a connection's cursors (wire/cdc_rx.h): the
 * honest cases, and each lie a peer can tell about its cursors, including
 * the two that passed before cdc_rx.c existed (a consumer cursor below zero
 * that stalled the window for good, a producer cursor a ring ahead of
 * rx_cons but more than a ring ahead of what we had advertised).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "cdc_rx.h"

#define RMB  65536u
#define PEER 16384u

static struct cdc_rx_state fresh(void)
{
	return (struct cdc_rx_state){.rmb_len = RMB, .peer_len = PEER};
}

/* A CDC whose cursors are the stream totals @prod and @cons. */
static struct cdc_msg cdc(uint64_t prod, uint64_t cons)
{
	return (struct cdc_msg){.prod = cdc_rx_curs_of(prod, RMB),
				.cons = cdc_rx_curs_of(cons, PEER)};
}

static void test_honest_data_and_credit(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = cdc(RMB, 0); /* a whole RMB written */

	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_int_equal(s.rx_prod, RMB);
	s.rx_cons = s.rx_cons_sent = RMB; /* read and told */
	m = cdc(2 * (uint64_t)RMB, 0);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_int_equal(s.rx_prod, 2 * (uint64_t)RMB);

	s.tx_sent = 3 * (uint64_t)PEER + 100; /* we wrote 3 rings and a bit */
	s.peer_cons = 2 * (uint64_t)PEER + 100;
	m = cdc(2 * (uint64_t)RMB, s.tx_sent); /* the peer read it all */
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_int_equal(s.peer_cons, s.tx_sent);
}

/* Before: at tx_sent = 0, cons = (65535, len - 1) read as "1 byte unread",
 * peer_cons became 2^64 - 1 and no later honest CDC could move it. */
static void test_cons_below_zero(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = {.cons = {.wrap = 0xFFFF, .count = PEER - 1}};

	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_BAD_CONS);
	assert_int_equal(s.peer_cons, 0);
	m = cdc(0, 0);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
}

static void test_cons_ahead_of_sent(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = cdc(0, 10); /* consumed 10 bytes we never sent */

	s.tx_sent = 5;
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_BAD_CONS);
}

/* Before: checked against rx_cons (1000), so 1000 + RMB passed, although
 * the peer only knew of rx_cons_sent = 0: rmb_len - (rx_prod - rx_cons_sent)
 * then wrapped below zero. */
static void test_prod_beyond_advertised(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = cdc(1000 + (uint64_t)RMB, 0);

	s.rx_prod = s.rx_cons = 1000; /* read, not yet told */
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_BAD_PROD);
	assert_int_equal(s.rx_prod, 1000);
	m = cdc(RMB, 0); /* exactly one RMB beyond what it knows: fine */
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_int_equal(s.rx_prod, RMB);
}

/* Behind what we told the peer we consumed: stale (a peer that moved to
 * another link rewinds, our cursor lost with the old one), no news; a
 * ring or more behind: a lie. */
static void test_prod_behind_advertised(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = cdc(500, 0);

	s.rx_prod = s.rx_cons = s.rx_cons_sent = 1000;
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_int_equal(s.rx_prod, 1000);
	s.rx_prod = s.rx_cons = s.rx_cons_sent = 2 * RMB + 1000;
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_BAD_PROD);
	assert_int_equal(s.rx_prod, 2 * RMB + 1000);
}

/* After a failover rewound what we sent: the peer's consumer cursor may
 * be ahead of it, up to what we ever sent, and we go on from there; beyond
 * that it is a lie. */
static void test_cons_after_rewind(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = cdc(0, 2000);

	s.tx_sent = 1000;
	s.tx_sent_max = 3000;
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_int_equal(s.peer_cons, 2000);
	assert_int_equal(s.tx_sent, 2000);
	m = cdc(0, 3500);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_BAD_CONS);
	assert_int_equal(s.peer_cons, 2000);
}

static void test_bad_cursor(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = {.prod = {.count = RMB}};

	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_BAD_CURSOR);
	m = (struct cdc_msg){.cons = {.count = PEER}};
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_BAD_CURSOR);
}

static void test_data_after_done_writing(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = cdc(100, 0);

	m.conn_state_flags = CDC_CS_PEER_DONE_WRITING;
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_true(s.peer_done_writing);
	m = cdc(200, 0);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_PROD_AFTER_DONE);
	assert_int_equal(s.rx_prod, 100);
	m = cdc(100, 0); /* a cursor-only update after the close is fine */
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
}

/* A CDC with flags: producer @prod, consumer 0. */
static struct cdc_msg cdc_fl(uint64_t prod, uint8_t prod_flags, uint8_t cs_flags)
{
	struct cdc_msg m = cdc(prod, 0);

	m.prod_flags = prod_flags;
	m.conn_state_flags = cs_flags;
	return m;
}

/*
 * A Linux peer killed in a lingering close (seen by the fault campaign): the close comes with
 * our RMB full and write_blocked set, the rest after it with the close flag
 * still set. Before the hold, the second CDC was CDC_RX_PROD_AFTER_DONE and
 * the reader had EOF at 65,536 of 131,072 bytes.
 */
static void test_close_while_blocked_holds_eof(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = cdc_fl(RMB, CDC_PF_WRITE_BLOCKED, 0);

	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	m = cdc_fl(RMB, CDC_PF_WRITE_BLOCKED, CDC_CS_PEER_CONN_CLOSED);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_true(s.peer_closed && s.eof_held && !cdc_rx_eof(&s));
	s.rx_cons = s.rx_cons_sent = RMB; /* read and told */
	/* the rest, in two writes: the first fills the window again */
	m = cdc_fl(RMB + RMB / 2, CDC_PF_WRITE_BLOCKED, CDC_CS_PEER_CONN_CLOSED);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_int_equal(s.rx_prod, RMB + RMB / 2);
	assert_true(s.eof_held);
	m = cdc_fl(2 * (uint64_t)RMB, 0, CDC_CS_PEER_CONN_CLOSED); /* took all it had */
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_int_equal(s.rx_prod, 2 * (uint64_t)RMB);
	assert_true(!s.eof_held && cdc_rx_eof(&s));
	/* after the end the reader is told of, data is a lie again */
	s.rx_cons = s.rx_cons_sent = 2 * (uint64_t)RMB;
	m = cdc_fl(2 * (uint64_t)RMB + 1, 0, CDC_CS_PEER_CONN_CLOSED);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_PROD_AFTER_DONE);
	assert_int_equal(s.rx_prod, 2 * (uint64_t)RMB);
}

/* While EOF is held the window still binds the peer. */
static void test_held_eof_keeps_window(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = cdc_fl(RMB, CDC_PF_WRITE_BLOCKED, CDC_CS_PEER_DONE_WRITING);

	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_true(s.eof_held);
	s.rx_cons = s.rx_cons_sent = RMB / 2;
	m = cdc_fl(RMB + RMB / 2 + 1, CDC_PF_WRITE_BLOCKED, CDC_CS_PEER_DONE_WRITING);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_BAD_PROD);
	assert_int_equal(s.rx_prod, RMB);
	/* its close after done_writing, still blocked: still held */
	m = cdc_fl(RMB, CDC_PF_WRITE_BLOCKED, CDC_CS_PEER_DONE_WRITING | CDC_CS_PEER_CONN_CLOSED);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_true(s.eof_held && s.peer_closed);
	/* an abort ends the stream with an error: nothing is held for it */
	m = cdc_fl(RMB, CDC_PF_WRITE_BLOCKED, CDC_CS_PEER_CONN_ABORT);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_true(!s.eof_held);
}

/* The caller ends the hold (the peer had nothing more, or the bound). */
static void test_hold_end(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = cdc_fl(RMB, CDC_PF_WRITE_BLOCKED, CDC_CS_PEER_CONN_CLOSED);

	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_false(cdc_rx_eof(&s));
	cdc_rx_hold_end(&s);
	assert_true(cdc_rx_eof(&s));
	s.rx_cons = s.rx_cons_sent = RMB;
	m = cdc_fl(RMB + 1, CDC_PF_WRITE_BLOCKED, CDC_CS_PEER_CONN_CLOSED);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_PROD_AFTER_DONE);
	/* the flag on a later CDC does not hold EOF again */
	m = cdc_fl(RMB, CDC_PF_WRITE_BLOCKED, CDC_CS_PEER_CONN_CLOSED);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_true(cdc_rx_eof(&s));
}

/* A peer that was not blocked when it closed (a usmc peer lingers until
 * all is sent) gives EOF at once, even with our RMB full. */
static void test_unblocked_close_no_hold(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = cdc_fl(RMB, 0, CDC_CS_PEER_CONN_CLOSED);

	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_true(cdc_rx_eof(&s) && !s.eof_held);
}

/* A stale (older) cursor is ignored, not a lie: cursors only grow. */
static void test_stale_cursors_ignored(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = cdc(300, 0);

	s.rx_prod = 400;
	s.tx_sent = 1000;
	s.peer_cons = 900;
	m.cons = cdc_rx_curs_of(800, PEER);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_int_equal(s.rx_prod, 400);
	assert_int_equal(s.peer_cons, 900);
}

/* A CDC that moves the producer by more than half the RMB marks a sender
 * that fills the window (Linux's); half or less per CDC (usmc's) does not,
 * however many such CDCs come. */
static void test_window_filler(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m;

	for (uint64_t prod = RMB / 2; prod <= 4 * (uint64_t)RMB; prod += RMB / 2) {
		m = cdc(prod, 0);
		assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
		s.rx_cons = s.rx_cons_sent = prod;
		assert_false(s.peer_fills_window);
	}
	m = cdc(s.rx_prod + RMB / 2 + 1, 0);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_true(s.peer_fills_window);
	s.rx_cons = s.rx_cons_sent = s.rx_prod;
	m = cdc(s.rx_prod + 100, 0);
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_true(s.peer_fills_window); /* for the rest of the connection */
}

/* A Linux peer's failover validation: in sync unless its last completed
 * CDC is newer than the newest we received (wrapping seqnos). */
static void test_failover_validation(void **state)
{
	(void)state;
	assert_true(cdc_rx_failover_in_sync(false, 0, 5)); /* nothing received yet */
	assert_true(cdc_rx_failover_in_sync(true, 7, 7));  /* the last one we saw */
	assert_true(cdc_rx_failover_in_sync(true, 9, 7));  /* we saw more: later ones lost */
	assert_false(cdc_rx_failover_in_sync(true, 6, 7)); /* one it saw complete, we never got */
	assert_false(cdc_rx_failover_in_sync(true, 0xfffe, 1)); /* across the wrap */
	assert_true(cdc_rx_failover_in_sync(true, 2, 0xffff));
}

static void test_flags(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = cdc(0, 0);

	s.rx_cons = 10; /* consumed, not told */
	s.rx_prod = 10;
	m = cdc(10, 0);
	m.prod_flags = CDC_PF_WRITE_BLOCKED;
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_true(s.peer_write_blocked && s.cons_update_due);
	s = fresh();
	m = cdc(0, 0);
	m.prod_flags = CDC_PF_CONS_CURS_UPD_REQ;
	m.conn_state_flags = CDC_CS_PEER_CONN_ABORT | CDC_CS_PEER_CONN_CLOSED;
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_OK);
	assert_true(s.cons_update_due && s.peer_abort && s.peer_closed);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_honest_data_and_credit),
		cmocka_unit_test(test_cons_below_zero),
		cmocka_unit_test(test_cons_ahead_of_sent),
		cmocka_unit_test(test_prod_beyond_advertised),
		cmocka_unit_test(test_prod_behind_advertised),
		cmocka_unit_test(test_cons_after_rewind),
		cmocka_unit_test(test_bad_cursor),
		cmocka_unit_test(test_data_after_done_writing),
		cmocka_unit_test(test_close_while_blocked_holds_eof),
		cmocka_unit_test(test_held_eof_keeps_window),
		cmocka_unit_test(test_hold_end),
		cmocka_unit_test(test_unblocked_close_no_hold),
		cmocka_unit_test(test_stale_cursors_ignored),
		cmocka_unit_test(test_window_filler),
		cmocka_unit_test(test_flags),
		cmocka_unit_test(test_failover_validation),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
