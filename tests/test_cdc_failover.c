// SPDX-License-Identifier: MIT
/*
 * The peer's failover-validation CDC (smcr_cdc.c sc_cdc_rx()): in sync, our
 * next CDC asks for the peer's cursors (CONS_CURS_UPD_REQ); a CDC lost
 * with the old link ends the connection. A Linux peer posts a consumer
 * cursor update on a link that then fails, never sees it complete, and
 * sends its news again only when it has more to write: with both ends
 * blocked on their windows the stream stalled for good
 * (test_multilink_kernel kcli-silent, 4 runs in 8 before). No device: the
 * fake link group of tests/common/fake_lgr.h, whose QP records the CDC.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cdc.h"
#include "cdc_rx.h"
#include "smcr_conn_int.h"

#include "common/fake_lgr.h"
#include "lgr_int.h" /* after lgr.h (in fake_lgr.h): lgr_flush_sends() */

#define RMB_BYTES  16384u
#define PEER_TOKEN 0x77u
#define LAST_SEQ   1288 /* the last CDC of the peer's we saw */

/* A connection blocked on the peer's window, the peer's CDCs seen up to
 * LAST_SEQ. */
static struct smcr_conn *blocked_conn(struct fake *f)
{
	struct smcr_conn *sc;

	assert_int_equal(smcr_conn_new(f->lgr, RMB_BYTES, RMB_BYTES, &sc), 0);
	pthread_mutex_lock(&sc->lock);
	sc->in_hs = false;
	sc->rx.peer_len = RMB_BYTES;
	sc->peer_token = PEER_TOKEN;
	sc->tx_prep = 2 * RMB_BYTES;
	sc->rx.tx_sent = sc->rx.tx_sent_max = RMB_BYTES; /* the peer's RMB full */
	sc->rx_seq = LAST_SEQ;
	sc->rx_seq_seen = true;
	pthread_mutex_unlock(&sc->lock);
	return sc;
}

/* The peer's failover validation: @seq, the last CDC it saw complete. */
static void validation_rx(struct fake *f, struct smcr_conn *sc, uint16_t seq)
{
	struct cdc_msg m = {
		.seqno = seq, .token = sc->token, .prod_flags = CDC_PF_FAILOVER_VALIDATION};
	uint8_t buf[CDC_MSG_LEN];

	assert_int_equal(cdc_encode(&m, buf, sizeof(buf)), CDC_MSG_LEN);
	sc_cdc_rx(f->lgr, buf, sizeof(buf));
}

/* Its pending sends gone (no completion comes), then the connection. */
static void conn_end(struct fake *f, struct smcr_conn *sc)
{
	lgr_flush_sends(f->lgr, lgr_conn_link(f->lgr));
	smcr_conn_discard(sc);
}

static void test_in_sync_asks_for_cursors(void **state)
{
	struct fake f;
	struct smcr_conn *sc;
	struct cdc_msg m;

	(void)state;
	fake_open(&f);
	sc = blocked_conn(&f);
	validation_rx(&f, sc, LAST_SEQ);
	/* one CDC, nothing to write: the question, our cursors with it */
	assert_int_equal(fake_nsent, 1);
	assert_int_equal(cdc_decode(fake_sent[0], CDC_MSG_LEN, &m), 0);
	assert_int_equal(m.token, PEER_TOKEN);
	assert_true(m.prod_flags & CDC_PF_CONS_CURS_UPD_REQ);
	assert_false(m.prod_flags & CDC_PF_FAILOVER_VALIDATION);
	pthread_mutex_lock(&sc->lock);
	assert_int_equal(sc->err, 0);
	assert_false(sc->ask_cursors); /* asked once */
	pthread_mutex_unlock(&sc->lock);
	conn_end(&f, sc);
	fake_close(&f);
}

static void test_lost_cdc_aborts(void **state)
{
	struct fake f;
	struct smcr_conn *sc;
	struct cdc_msg m;

	(void)state;
	fake_open(&f);
	sc = blocked_conn(&f);
	validation_rx(&f, sc, LAST_SEQ + 1);
	pthread_mutex_lock(&sc->lock);
	assert_int_equal(sc->err, -ECONNABORTED);
	pthread_mutex_unlock(&sc->lock);
	/* the abort goes to the peer, and asks nothing */
	assert_int_equal(fake_nsent, 1);
	assert_int_equal(cdc_decode(fake_sent[0], CDC_MSG_LEN, &m), 0);
	assert_true(m.conn_state_flags & CDC_CS_PEER_CONN_ABORT);
	assert_false(m.prod_flags & CDC_PF_CONS_CURS_UPD_REQ);
	conn_end(&f, sc);
	fake_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_in_sync_asks_for_cursors),
		cmocka_unit_test(test_lost_cdc_aborts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
