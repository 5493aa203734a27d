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

static void test_prod_behind_advertised(void **state)
{
	struct cdc_rx_state s = fresh();
	struct cdc_msg m = cdc(500, 0);

	s.rx_prod = s.rx_cons = s.rx_cons_sent = 1000;
	assert_int_equal(cdc_rx_apply(&s, &m), CDC_RX_BAD_PROD);
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
		cmocka_unit_test(test_bad_cursor),
		cmocka_unit_test(test_data_after_done_writing),
		cmocka_unit_test(test_stale_cursors_ignored),
		cmocka_unit_test(test_flags),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
